"""Train and time: one run's Trainer, its step timer, the compute/communication split and the failure path."""
