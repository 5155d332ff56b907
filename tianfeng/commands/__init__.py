"""The command-line layer: each `tianfeng COMMAND` parses and checks its flags here and calls the
library (tianfeng.api and the packages under tianfeng/). No library module imports this package;
tests/test_layers.py checks it."""
