"""Channels and what is published to them, changed in a unit of work (reading is reads.py's)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.builds import history
from buildbay.builds.models import BuildChannel, Channel
from buildbay.channels.names import is_channel_name
from buildbay.channels.reads import (
    CHANNEL,
    DEFAULT_CHANNEL,
    ChannelRecord,
    ChannelView,
    channel_view,
    channels_named,
)
from buildbay.db.concurrency import insert_unless_present
from buildbay.db.reads import Reads
from buildbay.errors import Conflict, NotFound, ValidationFailed
from buildbay.ids import new_id


class ChannelService:
    def __init__(self, db: AsyncSession, now: datetime) -> None:
        self.db = db
        self.now = now
        self.reads = Reads.within(db)

    async def create(self, application_id: str, name: str) -> ChannelView:
        channel = Channel(
            id=new_id("chn"), application_id=application_id, name=name, created_at=self.now
        )
        # Of two concurrent creations of one name, one inserts and the other is told.
        fields = {c: getattr(channel, c) for c in ("id", "application_id", "name", "created_at")}
        if not await insert_unless_present(self.db, Channel, fields):
            raise Conflict(
                f"The application already has a channel named {name}", code="channel_exists"
            )
        return ChannelView(CHANNEL.of_entity(channel), 0, None)

    async def create_default(self, application_id: str) -> None:
        """A new application's `default` channel."""
        self.db.add(
            Channel(
                id=new_id("chn"),
                application_id=application_id,
                name=DEFAULT_CHANNEL,
                created_at=self.now,
            )
        )
        await self.db.flush()

    async def delete(self, application_id: str, channel_id: str) -> None:
        """The channel goes; its builds stay (only their publication to it goes). `default`
        stays: a build verified without channels is published to it once it goes to
        everyone."""
        view = await channel_view(self.reads, application_id, channel_id)
        if view.channel.name == DEFAULT_CHANNEL:
            raise Conflict(
                "The default channel cannot be deleted: builds are published to it unless "
                "verify names other channels",
                code="default_channel",
            )
        await self.db.execute(delete(Channel).where(Channel.id == channel_id))

    async def check_names(self, application_id: str, names: list[str] | None) -> None:
        """422 unless the application has every channel named (None names none)."""
        if names:
            await self._named(application_id, names)

    async def _named(self, application_id: str, names: list[str]) -> list[ChannelRecord]:
        found = await channels_named(self.reads, application_id, names)
        missing = [name for name in dict.fromkeys(names) if name not in found]
        if missing:
            raise ValidationFailed.for_field(
                "channels",
                f"the application has no channel named {', '.join(missing)}; create it first",
                code="unknown_channel",
            )
        return list(found.values())

    async def publish_verified(
        self, application_id: str, build_id: str, names: list[str] | None, *, to_everyone: bool
    ) -> None:
        """Verify's publication: to the channels named; none named, to `default` only a build
        that goes to `everyone` (`to_everyone`), since the update check offers a channel's
        builds to whoever holds the key. A build kept to a group joins `default` when it
        reaches everyone later (`publish_reaching_everyone`)."""
        if names is None and not to_everyone:
            return
        await self.publish(application_id, build_id, names, replace=False)

    async def publish_reaching_everyone(self, application_id: str, build_id: str) -> None:
        """A build just distributed to `everyone` after verify: on `default` if it is on no
        channel (verified without channels, and kept to a group until now); a build on some
        channel stays where the team put it."""
        on_a_channel = await self.db.scalar(
            select(BuildChannel.channel_id).where(BuildChannel.build_id == build_id).limit(1)
        )
        if on_a_channel is None:
            await self.publish(application_id, build_id, None, replace=False)

    async def publish(
        self,
        application_id: str,
        build_id: str,
        names: list[str] | None,
        *,
        replace: bool,
        rollouts: dict[str, int] | None = None,
        actor_id: str | None = None,
    ) -> None:
        """Publish the build to the channels named (None: `default`, if the application has
        it). `replace`: to these channels only, taking it off the others. `rollouts`: the
        percentage of the installs of a channel (by name) that it is offered to; a channel not
        in it keeps its own, or starts at 100. Each change of a percentage joins the build's
        history as `actor_id`'s. An unknown name is a 422 and changes nothing."""
        if names is None:
            # Every application has it, unless its row was written without this service.
            found = list(
                (await channels_named(self.reads, application_id, [DEFAULT_CHANNEL])).values()
            )
        else:
            found = await self._named(application_id, names)
        asked = rollouts or {}
        if stray := sorted(set(asked) - {channel.name for channel in found}):
            raise ValidationFailed.for_field(
                "rolloutPercents",
                f"names {', '.join(stray)}, which channels does not list",
                code="unknown_channel",
            )
        current = await self._rollouts(build_id)
        if replace:
            await self.db.execute(
                delete(BuildChannel).where(
                    BuildChannel.build_id == build_id,
                    BuildChannel.channel_id.not_in([channel.id for channel in found]),
                )
            )
        for channel in found:
            was = current.get(channel.id)
            percent = asked.get(channel.name, 100 if was is None else was)
            if was is None:
                fields = {"channel_id": channel.id, "build_id": build_id}
                if not await insert_unless_present(
                    self.db, BuildChannel, fields | {"rollout_percent": percent}
                ):
                    continue  # published meanwhile by another request, which said how far
            elif percent != was:
                await self.db.execute(
                    update(BuildChannel)
                    .where(BuildChannel.build_id == build_id, BuildChannel.channel_id == channel.id)
                    .values(rollout_percent=percent)
                    .execution_options(synchronize_session=False)
                )
            else:
                continue
            if was is not None or percent != 100:
                await history.record(
                    self.db, build_id, self.now, actor_id, history.EventKind.ROLLOUT_CHANGED,
                    {"channel": channel.name, "from": was, "to": percent},
                )  # fmt: skip

    async def set_rollout(
        self, application_id: str, build_id: str, channel: str, percent: int,
        actor_id: str | None,
    ) -> None:  # fmt: skip
        """The build's rollout percentage on one channel it is published to (404
        `channel_not_found` if it is not on it)."""
        on = is_channel_name(channel) and await self.db.scalar(
            select(BuildChannel.channel_id)
            .join(Channel, Channel.id == BuildChannel.channel_id)
            .where(BuildChannel.build_id == build_id, Channel.name == channel)
        )
        if not on:
            raise NotFound(f"The build is not published to {channel}", code="channel_not_found")
        await self.publish(
            application_id, build_id, [channel], replace=False, rollouts={channel: percent},
            actor_id=actor_id,
        )  # fmt: skip

    async def _rollouts(self, build_id: str) -> dict[str, int]:
        """The build's rollout percentage on each channel it is published to, by channel id."""
        rows = await self.db.execute(
            select(BuildChannel.channel_id, BuildChannel.rollout_percent).where(
                BuildChannel.build_id == build_id
            )
        )
        return {row.channel_id: row.rollout_percent for row in rows}
