"""``fedsec identity`` and ``fedsec roster``: party identities and the federation's roster.

A party trusts its own identity key and the roster, nothing a server sends it (see
:mod:`fedsec.crypto.identity`). These commands make both by hand, the way a federation
sets itself up across organisations:

1. every party runs ``fedsec identity init NAME`` on its own machine: it writes the
   private identity file (mode 0600, never sent anywhere) and a public entry
   ``NAME.pub.json``, and prints the entry's **fingerprint**;
2. every party sends its ``NAME.pub.json`` to whoever builds the roster (by e-mail, a
   shared drive: the files are public);
3. that person runs ``fedsec roster create *.pub.json --out roster.json``, which prints
   every party's fingerprint and the roster fingerprint, and sends ``roster.json`` to
   every party;
4. every party runs ``fedsec roster show roster.json`` and compares **its own**
   fingerprint and the **roster** fingerprint with its peers over a channel an attacker
   does not control (a phone call, a video meeting, a signed letter). Only a roster whose
   fingerprints were compared protects against a server that swaps keys.

Public entry file (``NAME.pub.json``, written by ``identity init``)::

    {"fedsec": "public-entry", "version": 1, "name": "hospital-a",
     "public_key": "<base64, 32 bytes>", "fingerprint": "1a2b:..."}

(the fingerprint is informative; it is recomputed and must match).

Exit codes: 0 success; 2 bad input (missing, unreadable, malformed or group/other-readable
identity file, an output file that already exists, a roster that breaks a rule); the
tampering, protocol and undefined-result codes (3, 4, 5; :data:`fedsec.cli.EXIT_CODES`) do
not occur here.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

from fedsec._validation import check_int
from fedsec.cli.common import arg_type
from fedsec.crypto.identity import Identity, Roster, RosterEntry

__all__ = ["register", "read_public_entry", "write_public_entry", "public_entry_json",
           "PUBLIC_SUFFIX", "IDENTITY_SUFFIX"]

PUBLIC_SUFFIX = ".pub.json"
IDENTITY_SUFFIX = ".identity.json"
_MAX_FILE_BYTES = 1 << 20


class _InputError(ValueError):
    """Bad command-line input; the message names the file and the rule (exit code 2)."""


# ------------------------------------------------------------------ public entry files
def public_entry_json(entry: RosterEntry) -> dict[str, Any]:
    """The public entry file's JSON object."""
    return {"fedsec": "public-entry", "version": 1, "name": entry.name,
            "public_key": base64.b64encode(entry.public_key).decode(),
            "fingerprint": entry.fingerprint}


def write_public_entry(entry: RosterEntry, path: str | os.PathLike[str]) -> Path:
    """Write ``entry`` as a public entry file (mode 0644); refuse to overwrite."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(public_entry_json(entry), indent=1) + "\n")
    return p


def _read_text(path: Path) -> str:
    try:
        if path.is_dir():
            raise _InputError(f"{path}: is a directory, expected a file")
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise _InputError(f"{path}: larger than {_MAX_FILE_BYTES} bytes; not a fedsec "
                              "identity, entry or roster file")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _InputError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise _InputError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise _InputError(f"{path}: cannot be read ({exc.strerror})") from None


def _kind(text: str) -> str:
    try:
        obj = json.loads(text)
    except ValueError:
        return ""
    return str(obj.get("fedsec", "")) if isinstance(obj, dict) else ""


def read_public_entry(path: str | os.PathLike[str]) -> RosterEntry:
    """Read a public entry file; ``ValueError`` names the file and the broken rule."""
    p = Path(path)
    text = _read_text(p)
    kind = _kind(text)
    if kind == "identity":
        raise _InputError(f"{p}: is a PRIVATE identity file; pass the public entry "
                          f"(NAME{PUBLIC_SUFFIX}) that 'fedsec identity init' wrote next to "
                          "it, and never send the identity file to anyone")
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict) or obj.get("fedsec") != "public-entry" \
                or obj.get("version") != 1:
            raise ValueError(f"not a fedsec public entry (expected a NAME{PUBLIC_SUFFIX} "
                             "file written by 'fedsec identity init')")
        name, key = obj.get("name"), obj.get("public_key")
        if not isinstance(name, str):
            raise ValueError("'name' must be a string")
        if not isinstance(key, str):
            raise ValueError("'public_key' must be a base64 string")
        entry = RosterEntry(name, base64.b64decode(key, validate=True))
    except (TypeError, ValueError) as exc:
        raise _InputError(f"{p}: {exc}") from None
    stated = obj.get("fingerprint")
    if stated is not None and stated != entry.fingerprint:
        raise _InputError(f"{p}: the stated fingerprint does not match the public key "
                          "(the file was altered); ask the party for a new copy")
    return entry


def _load_identity(path: Path) -> Identity:
    text = _read_text(path)  # clear errors for missing/dir/size first
    kind = _kind(text)
    if kind == "public-entry":
        raise _InputError(f"{path}: is a public entry, not an identity file")
    if kind != "identity":
        raise _InputError(f"{path}: not a fedsec identity file (expected NAME"
                          f"{IDENTITY_SUFFIX}, written by 'fedsec identity init')")
    try:
        return Identity.load(path)
    except PermissionError as exc:
        raise _InputError(str(exc)) from None
    except ValueError as exc:
        raise _InputError(f"{path}: {exc}") from None


def _load_roster(path: Path) -> Roster:
    text = _read_text(path)
    try:
        return Roster.from_json(text)
    except ValueError as exc:
        raise _InputError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------- commands
def _entry_lines(entry: RosterEntry) -> list[str]:
    return [f"name:        {entry.name}",
            f"fingerprint: {entry.fingerprint}",
            f"public key:  {base64.b64encode(entry.public_key).decode()}"]


def _cmd_identity_init(args: argparse.Namespace) -> int:
    ident = Identity(args.name)  # ValueError on a bad name -> exit 2
    out = Path(args.out) if args.out else Path(f"{args.name}{IDENTITY_SUFFIX}")
    if args.pub:
        pub = Path(args.pub)
    elif out.name.endswith(IDENTITY_SUFFIX):
        pub = out.with_name(out.name[:-len(IDENTITY_SUFFIX)] + PUBLIC_SUFFIX)
    else:
        pub = out.with_name(f"{args.name}{PUBLIC_SUFFIX}")
    if pub.resolve() == out.resolve():
        raise _InputError("the identity file and the public entry must be different files")
    for p in (out, pub):
        if p.exists() or p.is_symlink():
            raise _InputError(f"{p}: already exists; refusing to overwrite (an identity is "
                              "made once; move the old file away if you really mean it)")
        if not p.parent.is_dir():
            raise _InputError(f"{p.parent}: no such directory")
    try:
        ident.save(out)
    except FileExistsError:
        raise _InputError(f"{out}: already exists; refusing to overwrite") from None
    try:
        write_public_entry(ident.entry(), pub)
    except FileExistsError:
        out.unlink()
        raise _InputError(f"{pub}: already exists; refusing to overwrite") from None
    entry = public_entry_json(ident.entry())
    if args.json:
        print(json.dumps({**entry, "identity_path": str(out), "public_entry_path": str(pub)},
                         indent=1))
        return 0
    print(f"identity (PRIVATE, mode 0600, keep it on this machine): {out}")
    print(f"public entry (send it to whoever builds the roster):   {pub}")
    for line in _entry_lines(ident.entry()):
        print(f"  {line}")
    print("Compare the fingerprint with your peers over a channel the server does not "
          "control (phone, video call) once the roster is built.")
    return 0


def _cmd_identity_show(args: argparse.Namespace) -> int:
    path = Path(args.path)
    kind = _kind(_read_text(path))
    if kind == "public-entry":
        entry = read_public_entry(path)
        private = False
    else:
        entry = _load_identity(path).entry()
        private = True
    if args.json:
        print(json.dumps({**public_entry_json(entry), "file": "identity" if private
                          else "public-entry"}, indent=1))
        return 0
    print(f"{'identity (private)' if private else 'public entry'}: {path}")
    for line in _entry_lines(entry):
        print(f"  {line}")
    return 0


def _cmd_roster_create(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if (out.exists() or out.is_symlink()) and not args.force:
        raise _InputError(f"{out}: already exists; refusing to overwrite (use --force to "
                          "replace it)")
    if not out.parent.is_dir():
        raise _InputError(f"{out.parent}: no such directory")
    entries = [read_public_entry(p) for p in args.entries]
    seen: dict[str, str] = {}
    keys: dict[bytes, str] = {}
    for path, e in zip(args.entries, entries, strict=True):
        if e.name in seen:
            raise _InputError(f"{path}: the name {e.name!r} is already taken by "
                              f"{seen[e.name]}; party names must be unique")
        if e.public_key in keys:
            raise _InputError(f"{path}: the same public key as {keys[e.public_key]}; each "
                              "party needs its own identity")
        seen[e.name] = path
        keys[e.public_key] = path
    if args.quorum is not None and not 2 <= args.quorum <= len(entries):
        raise _InputError(f"--quorum must be in 2..{len(entries)} (the number of parties); "
                          f"got {args.quorum}")
    try:
        roster = Roster(entries, quorum=args.quorum)
    except ValueError as exc:
        raise _InputError(str(exc)) from None
    roster.save(out)
    _print_roster(roster, out, args.json)
    return 0


def _print_roster(roster: Roster, path: Path, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"path": str(path), "fingerprint": roster.fingerprint,
                          "quorum": roster.quorum,
                          "parties": [public_entry_json(e) for e in roster.entries]},
                         indent=1))
        return
    print(f"roster: {path}")
    width = max(len(e.name) for e in roster.entries)
    for e in roster.entries:
        print(f"  {e.name:<{width}}  {e.fingerprint}")
    quorum = (str(roster.quorum) if roster.quorum is not None else
              "not set (semi-honest: 2; malicious: every party)")
    print(f"quorum: {quorum}")
    print(f"roster fingerprint: {roster.fingerprint}")
    print("Every party must see this roster fingerprint and its own fingerprint above; "
          "compare them over a channel the server does not control.")


def _cmd_roster_show(args: argparse.Namespace) -> int:
    path = Path(args.path)
    _print_roster(_load_roster(path), path, args.json)
    return 0


def _handle(func: Any) -> Any:
    """Turn our input errors into the CLI's one-line error and exit code 2."""
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = func(args)
            return code
        except _InputError as exc:
            print(f"fedsec: error: {exc}", file=sys.stderr)
            return 2
    return run


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def register(sub: Any) -> None:
    """Add the ``identity`` and ``roster`` sub-commands."""
    ident = sub.add_parser(
        "identity", help="make or show this party's signing identity (Ed25519)",
        description="A party's long-term signing identity. 'init' runs once, on the "
                    "party's own machine; the identity file never leaves it.")
    isub = ident.add_subparsers(dest="identity_command", metavar="ACTION")
    init = isub.add_parser(
        "init", help="create an identity file and its public entry",
        description="Create NAME's identity file (private, mode 0600) and public entry "
                    f"(NAME{PUBLIC_SUFFIX}); print the fingerprint to compare out of band. "
                    "Refuses to overwrite either file.")
    init.add_argument("name", metavar="NAME",
                      help="the party's name as the roster will list it (1-64 printable "
                           "ASCII characters, no spaces or '|')")
    init.add_argument("--out", metavar="PATH",
                      help=f"identity file (default: ./NAME{IDENTITY_SUFFIX})")
    init.add_argument("--pub", metavar="PATH",
                      help=f"public entry file (default: NAME{PUBLIC_SUFFIX} next to the "
                           "identity file)")
    init.add_argument("--json", action="store_true", help="print one JSON object")
    init.set_defaults(func=_handle(_cmd_identity_init))
    show = isub.add_parser(
        "show", help="print an identity's name, fingerprint and public entry",
        description="Print the name, fingerprint and public key of an identity file or a "
                    "public entry file. Never prints the private key.")
    show.add_argument("path", metavar="PATH",
                      help="an identity file (NAME.identity.json) or a public entry "
                           "(NAME.pub.json)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=_handle(_cmd_identity_show))
    ident.set_defaults(func=lambda _a: _usage(ident))

    rost = sub.add_parser(
        "roster", help="build or show the federation's roster",
        description="The roster lists every party's name and identity public key; every "
                    "party checks its fingerprint out of band.")
    rsub = rost.add_subparsers(dest="roster_command", metavar="ACTION")
    create = rsub.add_parser(
        "create", help="build a roster from the parties' public entries",
        description=f"Build a roster from public entry files (NAME{PUBLIC_SUFFIX}, written "
                    "by 'fedsec identity init'); print every fingerprint and the roster "
                    "fingerprint.")
    create.add_argument("entries", nargs="+", metavar="ENTRY",
                        help=f"public entry files (NAME{PUBLIC_SUFFIX})")
    create.add_argument("--quorum", type=arg_type(check_int, "--quorum", min_value=2), default=None,
                        help="fewest parties an evaluation may cover (default: not set, "
                             "i.e. 2 in semi-honest mode and every party in malicious mode; "
                             "each party may demand more in its own policy)")
    create.add_argument("--out", required=True, metavar="roster.json",
                        help="where to write the roster (refuses to overwrite without "
                             "--force)")
    create.add_argument("--force", action="store_true", help="replace an existing --out")
    create.add_argument("--json", action="store_true", help="print one JSON object")
    create.set_defaults(func=_handle(_cmd_roster_create))
    rshow = rsub.add_parser("show", help="print a roster's parties and fingerprints",
                            description="Print every party's name and fingerprint, the "
                                        "quorum and the roster fingerprint, to compare out "
                                        "of band.")
    rshow.add_argument("path", metavar="roster.json", help="the roster file to show")
    rshow.add_argument("--json", action="store_true", help="print one JSON object")
    rshow.set_defaults(func=_handle(_cmd_roster_show))
    rost.set_defaults(func=lambda _a: _usage(rost))
