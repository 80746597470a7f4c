"""Loading party files, bundled and synthetic data sets, federated splits."""

from fedsec.data.io import PartyData, load_party_csv, load_party_csvs

__all__ = ["PartyData", "load_party_csv", "load_party_csvs"]
