"""Shared pieces of the aiortc test peers (aiortc_peer.py, session_caller.py): a sine-tone audio
track, a receiving sink that measures what arrived (frame count, level, frequency), ICE server
conversion, and the one-line `summary {json}` output.

The frequency estimate needs no numpy: the median distance between rising zero crossings
(linearly interpolated) of the received mono signal. A clean tone through Opus gives the exact
frequency; packet-loss concealment or a gap only spoils a few intervals, which the median ignores.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import sys
import time
import urllib.error
import urllib.request
import wave
from array import array
from fractions import Fraction

from aiortc import MediaStreamTrack, RTCConfiguration, RTCIceServer
from aiortc.rtcconfiguration import RTCIceTransportPolicy
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame, AudioResampler

RATE = 48000
FRAME_SAMPLES = 960  # 20 ms, Opus's usual packet
WARMUP_FRAMES = 10  # the first 200 ms received are not measured (jitter buffer fill, decoder start)
MAX_MEASURED_SECONDS = 10
SILENCE_DBFS = -50.0


def emit(kind: str, **fields) -> None:
    """One progress line: `<kind> {json}` (the final one is `summary {json}`)."""
    print(f"{kind} {json.dumps(fields, sort_keys=True, default=str)}", flush=True)


def now_ms() -> float:
    return time.monotonic() * 1000


class ToneTrack(MediaStreamTrack):
    """A live audio track: a sine of `hz` (0: silence) at `amplitude` of full scale, 48 kHz mono
    s16, 20 ms frames paced in real time like a microphone. `muted` sends silence instead."""

    kind = "audio"

    def __init__(self, hz: float = 0.0, amplitude: float = 0.3):
        super().__init__()
        self.hz = hz
        self.amplitude = amplitude
        self.muted = False
        # `paused`: no frames at all (so no RTP), as an agent that has nothing to say may do.
        self.paused = False
        self._start: float | None = None
        self._pts = 0
        self.frames_sent = 0
        step = 2 * math.pi * hz / RATE
        # One second of tone: seamless in a loop for any whole-number frequency.
        self._table = array("h", (int(amplitude * 32767 * math.sin(step * i)) for i in range(RATE)))
        self._silence = bytes(FRAME_SAMPLES * 2)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self.paused:
            while self.paused:
                await asyncio.sleep(0.02)
            self._start = time.monotonic() - self._pts / RATE  # go on in real time, no burst
        if self._start is None:
            self._start = time.monotonic()
        else:
            wait = self._start + self._pts / RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        offset = self._pts % RATE
        if self.hz and not self.muted:
            chunk = self._table[offset:offset + FRAME_SAMPLES]
            if len(chunk) < FRAME_SAMPLES:
                chunk += self._table[:FRAME_SAMPLES - len(chunk)]
            data = chunk.tobytes()
        else:
            data = self._silence
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(data)
        frame.pts = self._pts
        frame.sample_rate = RATE
        frame.time_base = Fraction(1, RATE)
        self._pts += FRAME_SAMPLES
        self.frames_sent += 1
        return frame


class AudioSink:
    """Consumes a received audio track and keeps mono 48 kHz samples for analysis."""

    def __init__(self, record_path: str | None = None):
        self.frames = 0
        self.first_frame_ms: float | None = None
        self.samples = array("h")
        self.record_path = record_path
        self._resampler = AudioResampler(format="s16", layout="mono", rate=RATE)
        self._task: asyncio.Task | None = None

    def start(self, track: MediaStreamTrack) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._consume(track))

    async def _consume(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.frames += 1
            if self.first_frame_ms is None:
                self.first_frame_ms = now_ms()
            if self.frames <= WARMUP_FRAMES or len(self.samples) >= MAX_MEASURED_SECONDS * RATE:
                continue
            if frame.format.name == "s16" and frame.sample_rate == RATE:
                # Packed s16: keep the first channel as is (a downmix would lower the level by 3 dB).
                channels = len(frame.layout.channels)
                data = array("h", bytes(frame.planes[0])[: frame.samples * channels * 2])
                self.samples.extend(data[::channels])
                continue
            for mono in self._resampler.resample(frame):
                self.samples.frombytes(bytes(mono.planes[0])[: mono.samples * 2])

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def rms_dbfs(self) -> float | None:
        if not self.samples:
            return None
        mean_square = sum(s * s for s in self.samples) / len(self.samples)
        if mean_square <= 0:
            return -120.0
        return round(10 * math.log10(mean_square / (32768.0 ** 2)), 1)

    def dominant_hz(self) -> float | None:
        level = self.rms_dbfs()
        if level is None or level < SILENCE_DBFS:
            return None
        s = self.samples
        crossings = []
        for i in range(1, len(s)):
            a, b = s[i - 1], s[i]
            if a < 0 <= b:
                crossings.append(i - 1 + (-a) / (b - a))
        if len(crossings) < 10:
            return None
        intervals = [b - a for a, b in zip(crossings, crossings[1:])]
        return round(RATE / statistics.median(intervals), 1)

    def write_wav(self) -> None:
        if not self.record_path:
            return
        with wave.open(self.record_path, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(RATE)
            out.writeframes(self.samples.tobytes())

    def report(self) -> dict:
        self.write_wav()
        return {"audio_frames_received": self.frames, "rms_dbfs": self.rms_dbfs(), "dominant_hz": self.dominant_hz()}


def rtc_configuration(ice_servers: list, relay_only: bool = False) -> RTCConfiguration:
    """calling-server's `ice_servers` (RTCIceServer dictionaries) → aiortc's configuration."""
    servers = []
    for entry in ice_servers or []:
        urls = entry["urls"] if isinstance(entry["urls"], list) else [entry["urls"]]
        servers.append(RTCIceServer(urls=urls, username=entry.get("username"), credential=entry.get("credential")))
    return RTCConfiguration(iceServers=servers, iceTransportPolicy=RTCIceTransportPolicy.RELAY if relay_only else RTCIceTransportPolicy.ALL)


def http_json(method: str, url: str, payload=None, headers: dict | None = None, timeout: float = 10.0):
    """Blocking HTTP with a JSON body; returns (status, headers, parsed body or None)."""
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read()
            status, hdrs = response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        body = error.read()
        status, hdrs = error.code, dict(error.headers)
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = body.decode(errors="replace")
    return status, hdrs, parsed


async def rtp_stats(pc) -> dict:
    """packets_sent / packets_received from the peer connection's RTP stats."""
    sent = received = 0
    try:
        report = await asyncio.wait_for(pc.getStats(), 3)
    except Exception:  # noqa: BLE001 - stats are informative only
        return {"packets_sent": None, "packets_received": None}
    for stats in report.values():
        if stats.type == "outbound-rtp":
            sent += stats.packetsSent
        elif stats.type == "inbound-rtp":
            received += stats.packetsReceived
    return {"packets_sent": sent, "packets_received": received}


def selected_pair(pc) -> dict | None:
    """Candidate types of the nominated ICE pair (aioice internals; None if unavailable)."""
    try:
        for transceiver in pc.getTransceivers():
            connection = transceiver.receiver.transport.transport._connection
            pair = connection._nominated.get(1)
            if pair is not None:
                return {"local": pair.local_candidate.type, "remote": pair.remote_candidate.type,
                        "local_address": pair.local_candidate.host, "remote_address": pair.remote_candidate.host}
        if pc.sctp is not None:
            connection = pc.sctp.transport.transport._connection
            pair = connection._nominated.get(1)
            if pair is not None:
                return {"local": pair.local_candidate.type, "remote": pair.remote_candidate.type,
                        "local_address": pair.local_candidate.host, "remote_address": pair.remote_candidate.host}
    except AttributeError:
        pass
    return None


def die(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)
