"""FedAvg on Flower with fedsec's recording strategy; each client's FSV at the end."""
