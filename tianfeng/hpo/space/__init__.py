"""A search space: the YAML file read and checked, and a trial's values made into the run config the
engine trains."""
