"""What a project's group mapping may hold (sso/groups.py; the API's schemas say it too)."""

MAX_MAPPINGS = 100
MAX_GROUP_NAME = 256
