from __future__ import annotations

from pydantic import Field

from buildbay.schemas import ApiModel, Timestamp


class UpdateBuild(ApiModel):
    build_id: str
    version_name: str | None = Field(description="APK versionName, IPA CFBundleShortVersionString")
    version_code: int | None = Field(
        description="APK versionCode, IPA CFBundleVersion when a whole number"
    )
    notes: str | None = Field(description="Its release notes")
    file_size: int
    sha256: str | None
    published_at: Timestamp | None = Field(description="When it became ready")
    install_url: str = Field(
        description="Its public install page (on iOS, the page's button is the itms-services "
        "link); open it in the browser"
    )
    download_url: str = Field(description="A short-lived signed address of the file itself")


class UpdateCheck(ApiModel):
    update_available: bool
    mandatory: bool = Field(
        description="A build newer than the caller on the channel is mandatory: the app should "
        "not be used until it is updated"
    )
    build: UpdateBuild | None = Field(description="The build to update to, or null")
