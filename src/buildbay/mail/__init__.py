"""Mail: messages composed from templates (message.py), written to the outbox in the unit of
work that causes them (outbox.py), and delivered by the job worker over SMTP or, without an
SMTP server, as .eml files (transports.py)."""
