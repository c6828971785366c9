"""The Python SDK: `Buildbay` (synchronous, sync_client.py) and `AsyncBuildbay` (asyncio,
async_client.py), over httpx.

Both run the same ops (ops.py) and the same flows (flows.py): each multi-step job (a request
with its retries, an upload, a download) is written once, in `Core`, as a generator that yields
what it needs done (send this, sleep that long, PUT the file) and gets the outcome back; each
client carries those actions out its own way, blocking or awaited. Their method tables are the
one thing written twice: a method is typed as blocking in one and awaited in the other, which
Python's types cannot say once. The policy:

- errors come back as typed exceptions (errors.py) carrying the problem+json answer;
- 429 waits for Retry-After, 503 and a connection that could not be opened are retried with
  exponential backoff; a connection that broke after the request was sent is retried only for
  an idempotent step (never a second upload link or a second project);
- an expired access token is refreshed with the refresh token, once, and the new pair handed to
  `on_tokens` (the CLI saves it);
- `upload_build` runs the three steps, streams the file from disk (memory stays flat whatever
  its size), declares its SHA-256, retries the PUT when the connection breaks or the server is
  restarting, and answers the ready build. A file above `multipart_threshold` goes in parts,
  several at once; the upload's state is kept under `resume_dir`, so that uploading the same
  file again after a kill or a broken network sends only the parts the server lacks.
"""

from __future__ import annotations

from buildbay_client.async_client import AsyncBuildbay
from buildbay_client.flows import (
    MULTIPART_THRESHOLD,
    PARTS_IN_FLIGHT,
    Progress,
    RetryPolicy,
    default_resume_dir,
    file_sha256,
)
from buildbay_client.sync_client import Buildbay

__all__ = [
    "MULTIPART_THRESHOLD",
    "PARTS_IN_FLIGHT",
    "AsyncBuildbay",
    "Buildbay",
    "Progress",
    "RetryPolicy",
    "default_resume_dir",
    "file_sha256",
]
