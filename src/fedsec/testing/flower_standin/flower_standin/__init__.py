"""fedsec's stand-in Flower app: a two-step bytes protocol over the Message API."""
