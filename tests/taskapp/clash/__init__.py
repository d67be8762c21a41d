"""A second example app whose processor takes a name already given (the
system check's duplicate case)."""
