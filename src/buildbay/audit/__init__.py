"""The audit log (issue 41): who did what to whom, recorded in the unit of work that did it."""
