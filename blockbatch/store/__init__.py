"""The persistence layer: every SQL statement and every overlay state transition."""
