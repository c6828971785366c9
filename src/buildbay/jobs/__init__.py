"""The outbox: work that must happen once a change has committed (a mail, a webhook delivery),
written as a `jobs` row in the same transaction as the change, then run by a worker in each
`serve` process (worker.py). See docs/operations.md, "Background jobs"."""
