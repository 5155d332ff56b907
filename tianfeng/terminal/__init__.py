"""What a person at a terminal sees: logging to stderr, plain-text tables, live progress, and Ctrl-C
that never cuts a database write in half."""
