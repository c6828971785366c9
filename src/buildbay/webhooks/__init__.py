"""Signed webhooks (Standard Webhooks): a project's endpoints, the events the services emit into
the outbox in the unit of work of their change, and the worker's deliveries with retries."""
