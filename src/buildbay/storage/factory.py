"""The storage backend the settings ask for."""

from __future__ import annotations

from buildbay.clock import Clock
from buildbay.config import Settings, StorageKind
from buildbay.storage.base import Storage
from buildbay.storage.local import LocalStorage
from buildbay.storage.signing import UrlSigner


def create_storage(settings: Settings, signer: UrlSigner, clock: Clock) -> Storage:
    if settings.storage is StorageKind.S3:
        from buildbay.storage.s3 import S3Storage  # botocore loads only when it is used

        assert settings.s3_bucket  # checked by Settings
        return S3Storage(
            settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            clock=clock.now,
        )
    return LocalStorage(settings.storage_dir, settings.resolved_public_url, signer)
