"""Imports every model so that Base.metadata knows all tables (for Alembic)."""

from buildbay.applications.models import Application, UpdateKey
from buildbay.audit.models import AuditEntry
from buildbay.auth.models import (
    ApiToken,
    BrowserSession,
    EmailChange,
    PasswordReset,
    RefreshToken,
    SecretShownOnce,
    Session,
    User,
)
from buildbay.builds.models import (
    Build,
    BuildChannel,
    BuildIcon,
    Channel,
    InstallLink,
    RemovedBuild,
    RemovedInstallLink,
)
from buildbay.db.base import Base
from buildbay.devices.models import (
    AppleApiKey,
    AppleDeviceRegistration,
    BuildProfileDevice,
    Device,
    DeviceChallenge,
)
from buildbay.distribution.models import (
    BuildDistribution,
    BuildGroup,
    BuildRecipient,
    GroupTester,
    InstallEvent,
    InvitationGroup,
    TesterGroup,
)
from buildbay.feedback.models import Feedback, FeedbackComment, FeedbackScreenshot
from buildbay.invitations.models import (
    Invitation,
    InvitationBlock,
    InvitationCount,
    InvitationLink,
)
from buildbay.jobs.models import Job
from buildbay.projects.models import Project, ProjectMember
from buildbay.publishers.models import TrustedPublisher, UsedIdToken
from buildbay.sso.models import SsoGroupMapping, SsoIdentity, SsoMembership
from buildbay.webhooks.models import Webhook, WebhookAttempt, WebhookDelivery

__all__ = [
    "ApiToken",
    "AppleApiKey",
    "AppleDeviceRegistration",
    "Application",
    "AuditEntry",
    "Base",
    "BrowserSession",
    "Build",
    "BuildChannel",
    "BuildDistribution",
    "BuildGroup",
    "BuildIcon",
    "BuildProfileDevice",
    "BuildRecipient",
    "Channel",
    "Device",
    "DeviceChallenge",
    "EmailChange",
    "Feedback",
    "FeedbackComment",
    "FeedbackScreenshot",
    "GroupTester",
    "InstallEvent",
    "InstallLink",
    "Invitation",
    "InvitationBlock",
    "InvitationCount",
    "InvitationGroup",
    "InvitationLink",
    "Job",
    "PasswordReset",
    "Project",
    "ProjectMember",
    "RefreshToken",
    "RemovedBuild",
    "RemovedInstallLink",
    "SecretShownOnce",
    "Session",
    "SsoGroupMapping",
    "SsoIdentity",
    "SsoMembership",
    "TesterGroup",
    "TrustedPublisher",
    "UpdateKey",
    "UsedIdToken",
    "User",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
]
