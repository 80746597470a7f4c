"""fedsec's Flower app: every fedsec protocol across machines (the run config picks it)."""
