"""A property over the ways an IP address can be written in a URL (octal, hex, integers, fewer
parts, a trailing dot, digits of other scripts, percent-escapes, IPv6 forms that carry an IPv4
address): whatever the check at saving takes, the sender connects only to a public address, or
logs a refused attempt; and what the check refuses, the sender refuses too, connecting nowhere.

The sender is the real one (its parser, its guard, its resolver); only the last step, the TCP
connection to an address the guard let through, is a recorder, so no test reaches the Internet.
Which addresses are public is written here from the IANA special-purpose registries, apart from
the guard's own list."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable
from typing import Any

import httpcore
from hypothesis import example, given, settings
from hypothesis import strategies as st

from buildbay.webhooks.delivery import Outcome, WebhookSender
from buildbay.webhooks.transport import NOT_PUBLIC, url_problem

# IPv4 special-purpose blocks (RFC 6890 and IANA's registry), multicast, the limited broadcast,
# and the metadata address some clouds keep outside them.
NOT_PUBLIC_V4 = [
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
        "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "100.100.100.200/32",
    )
]  # fmt: skip
GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
NOT_PUBLIC_V6 = [ipaddress.IPv6Network(n) for n in ("2001::/23", "2001:db8::/32", "3fff::/20")]
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
COMPATIBLE = ipaddress.IPv6Network("::/96")
SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


def public(connected: str) -> bool:
    address = ipaddress.ip_address(connected)
    if isinstance(address, ipaddress.IPv6Address):
        low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in NAT64:
            address = low
        elif address in COMPATIBLE:
            return False  # deprecated; ::1 and :: among them
        elif address in SIX_TO_FOUR:
            address = ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF)
        else:
            return address in GLOBAL_UNICAST_V6 and not any(address in n for n in NOT_PUBLIC_V6)
    return not any(address in n for n in NOT_PUBLIC_V4) and str(address) != "255.255.255.255"


class Recorder(httpcore.AsyncNetworkBackend):
    """Stands where the TCP connection would be made: notes the address, connects nowhere."""

    def __init__(self) -> None:
        self.connected: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connected.append(host)
        raise httpcore.ConnectError("not connected: a test")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _attempt(url: str) -> tuple[Outcome, list[str]]:
    recorder = Recorder()
    sender = WebhookSender(allow_private=False, allow_http=True, timeout=5, network=recorder)
    try:
        outcome = await sender.send(url, ["whsec_" + "A" * 44], "msg_1", "{}")
    finally:
        await sender.aclose()
    return outcome, recorder.connected


# Digits of other scripts that a lenient reader (NFKC, UTS #46) or a human takes for 0-9.
DIGITS = {
    "fullwidth": "".join(chr(0xFF10 + d) for d in range(10)),
    "circled": chr(0x24EA) + "".join(chr(0x2460 + d) for d in range(9)),
    "arabic-indic": "".join(chr(0x0660 + d) for d in range(10)),
    "devanagari": "".join(chr(0x0966 + d) for d in range(10)),
    "mathematical bold": "".join(chr(0x1D7CE + d) for d in range(10)),
}

SPECIAL = [
    "127.0.0.1", "10.11.12.13", "169.254.169.254", "100.100.100.200", "192.168.1.1", "0.0.0.0",  # noqa: S104
    "172.16.0.1", "100.64.0.1", "224.0.0.1", "255.255.255.255", "192.0.2.1", "93.184.215.14",
    "8.8.8.8", "1.1.1.1", "192.0.0.9", "192.88.99.1",
]  # fmt: skip
addresses = st.sampled_from(SPECIAL).map(ipaddress.IPv4Address) | st.integers(0, 2**32 - 1).map(
    ipaddress.IPv4Address
)


def _number(value: int, base: str, zeros: int, upper: bool) -> str:
    if base == "oct":
        text = "0" + format(value, "o")
    elif base == "hex":
        text = ("0X" if upper else "0x") + format(value, "X" if upper else "x")
    else:
        text = str(value)
    if base != "hex":
        text = "0" * zeros + text
    return text


@st.composite
def ipv4_spellings(draw: st.DrawFn, address: ipaddress.IPv4Address) -> str:
    """How inet_aton, a browser or a lenient parser may read `address`: 1 to 4 parts, the
    last one taking the remaining bytes, each in decimal, octal or hex; perhaps a trailing
    dot, digits of another script, a percent-escape."""
    count = draw(st.integers(1, 4))
    packed = address.packed
    values = [*packed[: count - 1], int.from_bytes(packed[count - 1 :])]
    parts = [
        _number(
            v,
            draw(st.sampled_from(["dec", "dec", "oct", "hex"])),
            draw(st.integers(0, 2)),
            draw(st.booleans()),
        )
        for v in values
    ]
    # Digits of another script in one part, never the last (a name ending in a label of
    # another script is a name, resolved by DNS: no test sends queries out).
    if count > 1 and draw(st.booleans()):
        script = DIGITS[draw(st.sampled_from(sorted(DIGITS)))]
        index = draw(st.integers(0, count - 2))
        if parts[index].isdigit():
            parts[index] = "".join(script[int(c)] for c in parts[index])
    host = ".".join(parts)
    if draw(st.booleans()) and host[0].isdigit():
        host = f"%{ord(host[0]):02X}{host[1:]}"
    if draw(st.integers(0, 5)) == 0:
        host += "."
    return host


def ipv6_spellings(address: ipaddress.IPv4Address) -> st.SearchStrategy[str]:
    """IPv6 addresses that carry `address`: mapped, compatible, NAT64 and 6to4."""
    value = int(address)
    high, low = value >> 16, value & 0xFFFF
    return st.sampled_from(
        [
            f"[::ffff:{address}]",
            f"[::ffff:{high:x}:{low:x}]",
            f"[::FFFF:{high:X}:{low:X}]",
            f"[::{address}]",
            f"[64:ff9b::{address}]",
            f"[64:ff9b::{high:x}:{low:x}]",
            f"[2002:{high:x}:{low:x}::1]",
            f"[0:0:0:0:0:ffff:{address}]",
        ]
    )


spellings = addresses.flatmap(
    lambda a: st.sampled_from([str(a)]) | ipv4_spellings(a) | ipv6_spellings(a)
) | st.sampled_from(["[::1]", "[::]", "[fe80::1]", "[fc00::1]", "[ff02::1]", "[2606:4700::1]",
                     "[2001:db8::1]", "[2001::1]", "[3fff::1]"])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(spellings)
@example("0177.0.0.1")
@example("①②⑦.0.0.1")
@example("2130706433")
@example("0x7f.1")
@example("[::7f00:1]")
@example("[64:ff9b::a00:1]")
@example("93.184.215.14")
def test_what_the_check_takes_the_sender_sends_only_to_a_public_address(host: str) -> None:
    url = f"http://{host}/hook"
    taken = url_problem(url, allow_http=True, allow_private=False) is None
    outcome, connected = asyncio.run(_attempt(url))
    # Every attempt ends in an outcome the log keeps: never an exception.
    assert outcome.status_code is None
    assert outcome.error
    if taken:
        assert all(public(address) for address in connected), (url, connected)
        if not connected:
            assert outcome.error == NOT_PUBLIC, (url, outcome)
    else:
        # Refused when saved, refused when sent (a URL saved under other rules): the same
        # reading, and no connection.
        assert connected == [], (url, connected)
        assert outcome.error.startswith("refused: "), (url, outcome)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["https://", "http://", "", "https://[", "https://x:", "http://0"]),
       st.text(max_size=80))  # fmt: skip
def test_any_text_is_a_url_taken_or_a_refusal_in_words(head: str, tail: str) -> None:
    """Whatever is typed, the check answers (the API's 422), never an exception of a parser."""
    problem = url_problem(head + tail, allow_http=True, allow_private=False)
    assert problem is None or (problem and problem[0].islower()), problem
