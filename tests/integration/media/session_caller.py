#!/usr/bin/env python3
"""A native-app style caller over HTTP sessions (docs/protocol.md, "HTTP sessions"), in aiortc.

    python3 session_caller.py --base http://HOST:PORT --api-key csk_… --room R --agent A
        [--tone HZ] [--seconds N] [--mute] [--relay-only] [--connect-timeout S]
    python3 session_caller.py --base http://HOST:PORT --call-id ID --access-token T …

With --api-key it first plays the app's backend: `POST /v1/calls {room_id, agent_id}` → call_id,
access_token, ice_servers (otherwise the call is given and ICE servers come from GET /v1/ice).
Then the app: a peer connection with a sine-tone Opus track and a data channel labelled
`control`, an offer with every candidate gathered, `POST /webrtc-proxy/{call_id}/v1/webrtc/sessions`
`{"identity":"client","sdp":…}` with `Authorization: Bearer <access_token>`, the 201 answer
applied. On the control channel it expects `{"type":"status","state":"connected"}`, sends
`{"type":"ping","ts":N}` and expects `{"type":"pong","ts":N}`, sends `{"type":"dtmf","digit":"5"}`
(and `{"type":"mute","muted":true}` with --mute), keeps the call --seconds after connecting while
measuring the audio it receives, then sends `{"type":"hangup"}`, waits (bounded) until the agent
has ended the session (a PATCH answers 404), and DELETEs the session (expecting 204).

Progress lines are `<event> {json}`; the last line is always `summary {json}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback
import urllib.parse

from aiortc import RTCPeerConnection, RTCSessionDescription

from rtc_common import AudioSink, ToneTrack, emit, http_json, now_ms, rtc_configuration, rtp_stats, selected_pair


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="http://HOST:PORT of calling-server")
    parser.add_argument("--api-key", help="create the call with this API key (the backend's step)")
    parser.add_argument("--room", help="room_id for POST /v1/calls")
    parser.add_argument("--agent", help="agent_id for POST /v1/calls")
    parser.add_argument("--call-id", help="an existing call (with --access-token)")
    parser.add_argument("--access-token", help="the call's access_token")
    parser.add_argument("--tone", type=float, default=0.0, metavar="HZ")
    parser.add_argument("--seconds", type=float, default=3.0, help="call length once connected")
    parser.add_argument("--mute", action="store_true", help="also send {type: mute, muted: true}")
    parser.add_argument("--relay-only", action="store_true")
    parser.add_argument("--connect-timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    if not args.api_key and not (args.call_id and args.access_token):
        parser.error("give --api-key, or --call-id and --access-token")
    return args


class SessionCall:
    def __init__(self, args):
        self.args = args
        self.base = args.base.rstrip("/")
        self.call_id = args.call_id
        self.token = args.access_token
        self.ice_servers: list = []
        self.pc: RTCPeerConnection | None = None
        self.control = None
        self.control_messages: asyncio.Queue = asyncio.Queue()
        self.tone = ToneTrack(args.tone)
        self.sink = AudioSink()
        self.connected = asyncio.Event()
        self.control_open = asyncio.Event()
        self.closed = asyncio.Event()
        self.result = {
            "call_id": None, "session_id": None, "post_status": None, "post_ms": None, "delete_status": None,
            "connected": False, "connect_ms": None, "status_messages": [], "pong_ok": False, "ping_rtt_ms": None,
            "control_sent": [], "control_received": [], "agent_ended_session": None, "hangup_to_session_end_ms": None,
            "remote_closed_after_hangup": None,
            "selected_pair": None, "tone_hz": args.tone, "errors": [],
        }
        self.post_started_ms: float | None = None

    async def http(self, method: str, path: str, payload=None, headers=None):
        return await asyncio.to_thread(http_json, method, self.base + path, payload, headers, 15)

    async def create_call(self) -> None:
        body = {k: v for k, v in (("room_id", self.args.room), ("agent_id", self.args.agent)) if v}
        status, _, call = await self.http("POST", "/v1/calls", body, {"X-API-Key": self.args.api_key})
        if status != 201:
            raise RuntimeError(f"POST /v1/calls answered {status}: {call}")
        self.call_id, self.token, self.ice_servers = call["call_id"], call["access_token"], call["ice_servers"]
        emit("call-created", call_id=self.call_id, peer_id=call.get("peer_id"), room_id=call.get("room_id"))

    def send_control(self, message: dict) -> None:
        self.control.send(json.dumps(message))
        self.result["control_sent"].append(message)

    async def next_control(self, wanted, timeout: float) -> dict:
        """Next control message for which `wanted(msg)` holds (others are kept in the summary)."""
        deadline = time.monotonic() + timeout
        while True:
            msg = await asyncio.wait_for(self.control_messages.get(), max(0.01, deadline - time.monotonic()))
            if wanted(msg):
                return msg

    async def run(self) -> None:
        args = self.args
        if args.api_key:
            await self.create_call()
        else:
            status, _, answer = await self.http("GET", "/v1/ice", None, {"Authorization": f"Bearer {self.token}"})
            if status != 200:
                raise RuntimeError(f"GET /v1/ice answered {status}: {answer}")
            self.ice_servers = answer["ice_servers"]
        self.result["call_id"] = self.call_id

        pc = self.pc = RTCPeerConnection(rtc_configuration(self.ice_servers, args.relay_only))

        @pc.on("connectionstatechange")
        def on_state():
            emit("connection-state", state=pc.connectionState)
            if pc.connectionState == "connected" and not self.connected.is_set():
                self.result["connect_ms"] = round(now_ms() - self.post_started_ms, 1)
                self.result["connected"] = True
                self.result["selected_pair"] = selected_pair(pc)
                emit("connected", connect_ms=self.result["connect_ms"], pair=self.result["selected_pair"])
                self.connected.set()
            elif pc.connectionState in ("failed", "closed"):
                self.closed.set()

        @pc.on("track")
        def on_track(track):
            if track.kind == "audio":
                self.sink.start(track)

        pc.addTrack(self.tone)
        self.control = pc.createDataChannel("control")
        self.control.on("open", self.control_open.set)

        @self.control.on("message")
        def on_message(message):
            text = message if isinstance(message, str) else message.decode(errors="replace")
            try:
                msg = json.loads(text)
            except ValueError:
                msg = text
            self.result["control_received"].append(msg)
            if isinstance(msg, dict) and msg.get("type") == "status":
                self.result["status_messages"].append(msg.get("state"))
            emit("control", message=msg)
            self.control_messages.put_nowait(msg)

        await pc.setLocalDescription(await pc.createOffer())  # aiortc returns once gathering is complete
        path = f"/webrtc-proxy/{urllib.parse.quote(self.call_id, safe='')}/v1/webrtc/sessions"
        auth = {"Authorization": f"Bearer {self.token}"}
        self.post_started_ms = now_ms()
        status, _, answer = await self.http("POST", path, {"identity": "client", "sdp": pc.localDescription.sdp}, auth)
        self.result["post_status"] = status
        self.result["post_ms"] = round(now_ms() - self.post_started_ms, 1)
        if status != 201:
            raise RuntimeError(f"session POST answered {status}: {answer}")
        session_id = self.result["session_id"] = answer["session_id"]
        emit("session-created", session_id=session_id, post_ms=self.result["post_ms"])
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))

        try:
            await asyncio.wait_for(self.connected.wait(), args.connect_timeout)
            # The agent may send `status` as soon as it sees the channel, before this side has
            # processed the open acknowledgement; sending needs the channel open here.
            await asyncio.wait_for(self.control_open.wait(), 10)
            await self.next_control(lambda m: isinstance(m, dict) and m.get("type") == "status"
                                    and m.get("state") == "connected", 10)
            ts = int(time.time() * 1000)
            ping_sent = now_ms()
            self.send_control({"type": "ping", "ts": ts})
            pong = await self.next_control(lambda m: isinstance(m, dict) and m.get("type") == "pong", 5)
            self.result["pong_ok"] = pong.get("ts") == ts
            self.result["ping_rtt_ms"] = round(now_ms() - ping_sent, 1)
            self.send_control({"type": "dtmf", "digit": "5"})
            if args.mute:
                self.send_control({"type": "mute", "muted": True})
            try:
                await asyncio.wait_for(self.closed.wait(), args.seconds)
                self.result["errors"].append("the peer connection closed before the hangup")
            except asyncio.TimeoutError:
                pass
        except asyncio.TimeoutError as error:
            self.result["errors"].append(f"timeout: {error!r}")
        finally:
            await self.hang_up(path, session_id, auth)

    async def hang_up(self, path: str, session_id: str, auth: dict) -> None:
        session = f"{path}/{urllib.parse.quote(session_id, safe='')}"
        if self.control is not None and self.control.readyState == "open" and not self.closed.is_set():
            self.send_control({"type": "hangup"})
            await self.wait_agent_ended(session, auth)
        status, _, body = await self.http("DELETE", session, None, auth)
        self.result["delete_status"] = status
        emit("session-deleted", status=status)

    async def wait_agent_ended(self, session: str, auth: dict, timeout: float = 3.0) -> None:
        """No `ended` status follows a hangup, and an agent need not close its side of the DTLS
        association; what an agent that honours the hangup does is end the session (data
        {kind:"hangup"} to it), after which a PATCH answers 404. Probes with an end-of-candidates
        PATCH (harmless while the session lives) until then, bounded by `timeout`."""
        sent = now_ms()
        probe = {"candidate": {"candidate": "", "sdpMid": "0", "sdpMLineIndex": 0}}
        self.result["agent_ended_session"] = False
        while now_ms() - sent < timeout * 1000:
            status, _, body = await self.http("PATCH", session, probe, auth)
            if status == 404:
                self.result["agent_ended_session"] = True
                self.result["hangup_to_session_end_ms"] = round(now_ms() - sent, 1)
                emit("agent-ended-session", ms=self.result["hangup_to_session_end_ms"])
                break
            if status != 204:
                self.result["errors"].append(f"PATCH after hangup answered {status}: {body}")
                break
            await asyncio.sleep(0.05)  # nothing to await: the agent's hangup is only visible at the server
        self.result["remote_closed_after_hangup"] = self.closed.is_set()

    async def finish(self) -> dict:
        stats = await rtp_stats(self.pc) if self.pc is not None else {}
        self.sink.stop()
        if self.pc is not None:
            try:
                await asyncio.wait_for(self.pc.close(), 5)
            except Exception:  # noqa: BLE001
                pass
        return {**self.result, **stats, **self.sink.report(), "frames_sent": self.tone.frames_sent}


async def main(args) -> int:
    call = SessionCall(args)
    try:
        await asyncio.wait_for(call.run(), args.connect_timeout + args.seconds + 20)
    except Exception as error:  # noqa: BLE001 - the summary says what went wrong
        traceback.print_exc(file=sys.stdout)
        call.result["errors"].append(f"run: {error!r}")
    try:
        summary = await asyncio.wait_for(call.finish(), 10)
    except Exception as error:  # noqa: BLE001
        summary = {**call.result, "errors": [*call.result["errors"], f"finish: {error!r}"]}
    emit("summary", **summary)
    return 0 if summary.get("connected") and not summary.get("errors") else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
