"""Real Chromium, driven by Selenium through Debian's chromedriver, inside a network namespace.

libnice (the Linux peer) gathers no ICE candidates on loopback, and Chromium should not reach any
network but the test's own, so the browser tests run in the private lab of
tests/integration/media/netns.py: calling-server on the server host, chromedriver and its
Chromium sessions on peer host A (10.231.1.2), Linux peers on peer host B (10.231.2.2). Pages are
loaded from the server host's address on A's link, `http://10.231.1.1:PORT/`.

chromedriver listens on 127.0.0.1 *inside* host A, where the test process (which stays in the
host's namespace) cannot connect. `Forwarder` bridges that: it listens on 127.0.0.1 in the host's
namespace and, for each connection Selenium opens, connects to chromedriver with a socket created
by a thread that has entered host A's namespace (a socket belongs to the namespace of the thread
that creates it; netns.Namespace.call), then copies bytes both ways.

Chromium runs headless as root (no sandbox) with fake capture devices (a beep as microphone, the
permission prompt answered), autoplay allowed, real host candidates instead of mDNS names, none of
the background services, and `--unsafely-treat-insecure-origin-as-secure` for the server's origin:
browsers give `getUserMedia` only to secure contexts (https or localhost), and the page is plain
http on a lab address. Every session is quit, chromedriver killed with its process group, and the
lab's teardown SIGKILLs whatever still runs in the namespaces (Chromium included).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import netns
from chromium_peer import CHROMIUM, CHROMIUM_BASE_FLAGS

from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMEDRIVER_PORT = 9515  # inside host A's own namespace: nothing else listens there
WINDOW = (1000, 700)

# The media tests' flags (tests/integration/media/chromium_peer.py), then no throttling of pages in
# background or occluded windows (several sessions run at once), and a fixed window size.
CHROMIUM_FLAGS = [
    *CHROMIUM_BASE_FLAGS,
    "--disable-renderer-backgrounding", "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
]


def missing() -> str | None:
    """None when the browser tests can run here, else why they skip."""
    reason = netns.namespaces_available()
    if reason is not None:
        return reason
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is missing: install the Debian package `{package}` (deploy/install-deps.sh --test)"
    return None


class Forwarder:
    """127.0.0.1:<port> in the host's namespace → 127.0.0.1:<target_port> inside `host`."""

    def __init__(self, host: netns.Namespace, target_port: int):
        self.host = host
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, name="chromedriver-forwarder", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = self.host.call(socket.create_connection, ("127.0.0.1", self.target_port), 5, timeout=8)
            except Exception:  # chromedriver not up (yet): Selenium sees a closed connection
                client.close()
                continue
            with self.lock:
                if self.closed:
                    client.close()
                    upstream.close()
                    return
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        with self.lock:
            self.closed = True
            sockets, self.sockets = self.sockets, []
        self.listener.close()
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass


class Browser:
    """One Chromium session (a Selenium WebDriver) with helpers for bounded waits."""

    def __init__(self, driver: webdriver.Remote, label: str, base_url: str):
        self.driver = driver
        self.label = label
        self.base_url = base_url

    def set_viewport(self, width: int, height: int) -> None:
        """Sizes the window so the page itself (and so a screenshot) is width x height."""
        self.driver.set_window_size(width, height)
        inner = self.js("return [window.innerWidth, window.innerHeight];")
        self.driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def js_async(self, script: str, *args, timeout: float = 10.0):
        """Runs `script` with `done` = arguments[arguments.length - 1]; bounded by `timeout`."""
        self.driver.set_script_timeout(timeout)
        return self.driver.execute_async_script(script, *args)

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def wait(self, condition, timeout: float = 10.0, what: str = "condition"):
        """Polls `condition(browser)` until it returns something truthy; fails naming `what`."""
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.1,
                                 ignored_exceptions=(WebDriverException,)).until(lambda _: condition(self))
        except TimeoutException:
            raise AssertionError(f"{self.label}: {what} not within {timeout}s; page state: {self.page_state()}") \
                from None

    def wait_js(self, expression: str, timeout: float = 10.0, what: str | None = None, *args):
        """Waits until the JS `expression` (a function body's return value) is truthy; returns it."""
        return self.wait(lambda b: b.js(f"return ({expression});", *args), timeout, what or expression)

    def wait_css(self, css: str, timeout: float = 10.0, what: str | None = None):
        return self.wait(lambda b: (b.find_all(css) or [None])[0], timeout, what or f"an element {css}")

    def attr(self, css: str, name: str):
        elements = self.find_all(css)
        return elements[0].get_attribute(name) if elements else None

    def seqs(self) -> list[int]:
        """The committed chat messages on the demo page, in DOM order."""
        return [int(s) for s in self.js(
            "return [...document.querySelectorAll('#chat-log li[data-seq]')].map(li => li.dataset.seq);")]

    def chat_items(self) -> list[dict]:
        return self.js("""return [...document.querySelectorAll('#chat-log li')].map(li => ({
            seq: li.dataset.seq ? Number(li.dataset.seq) : null, from: li.dataset.from, own: li.dataset.own,
            pending: li.hasAttribute('data-pending'), failed: li.hasAttribute('data-failed'),
            text: li.querySelector('.text')?.textContent ?? '',
            readBy: li.querySelector('.receipt')?.dataset.readBy ?? null}));""")

    def page_state(self) -> str:
        try:
            state = self.js("""return {url: location.pathname + location.hash.slice(0, 12),
                status: document.querySelector('#status')?.textContent,
                notice: document.querySelector('#notice')?.textContent,
                error: document.querySelector('#connect-error')?.textContent,
                visibility: document.visibilityState, focus: document.hasFocus(),
                scroll: (s => s && [s.scrollTop, s.scrollHeight, s.clientHeight])(document.querySelector('#chat-scroll')),
                unread: document.querySelector('#unread')?.dataset.count,
                lastSeq: window.demo?.client?.lastSeq};""")
            return json.dumps(state)
        except WebDriverException as error:
            return f"(unreadable: {error.msg})"

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        assert self.driver.save_screenshot(str(path)), f"{self.label}: screenshot failed"
        return path

    def console(self) -> list:
        try:
            return self.driver.execute("getLog", {"type": "browser"})["value"]
        except WebDriverException:
            return []

    def quit(self) -> None:
        try:
            self.driver.quit()
        except Exception:
            pass


class BrowserLab:
    """chromedriver on peer host A and the Chromium sessions it runs; `close()` ends them all."""

    def __init__(self, lab: netns.Lab, server: netns.NsServer, host: netns.PeerHost | None = None):
        self.lab = lab
        self.server = server
        self.host = host or lab.a  # another peer host gets its own chromedriver (its own namespace)
        self.base_url = server.base_url_for(self.host)
        self.browsers: list[Browser] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("CALLING_")}
        self.chromedriver = lab.spawn(self.host, [CHROMEDRIVER, f"--port={CHROMEDRIVER_PORT}", "--allowed-ips=127.0.0.1"],
                                      f"chromedriver-{self.host.name}", env=env)
        self.chromedriver.wait_for_output(r"ChromeDriver was started successfully", 10)
        self.forwarder = Forwarder(self.host, CHROMEDRIVER_PORT)

    def browser(self, label: str) -> Browser:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        # No --user-data-dir: chromedriver makes (and removes) a fresh profile per session; with an
        # explicit one this chromedriver/Chromium pair times out talking to the first renderer.
        options.add_argument(f"--unsafely-treat-insecure-origin-as-secure={self.base_url}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Remote(command_executor=f"http://127.0.0.1:{self.forwarder.port}", options=options)
        driver.set_page_load_timeout(15)
        browser = Browser(driver, label, self.base_url)
        browser.set_viewport(*WINDOW)
        self.browsers.append(browser)
        return browser

    def diagnostics(self) -> str:
        parts = []
        for browser in self.browsers:
            lines = [f"{entry.get('level')} {entry.get('message')}" for entry in browser.console()]
            parts.append(f"--- {browser.label}: {browser.page_state()} console ---\n" + "\n".join(lines[-40:]))
        return "\n".join(parts)

    def close(self) -> None:
        for browser in self.browsers:
            browser.quit()
        self.forwarder.close()
        self.chromedriver.kill()


# Moved to netns.py (the media tests restart servers too); the name stays here for the browser tests.
RestartableServer = netns.RestartableServer


def presence_socket(server: netns.NsServer, token: str, query: str = ""):
    """A raw WebSocket client on /v1/presence (a caller), connected from inside the server host."""
    import support

    def connect():
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(support.upgrade_request(f"/v1/presence?token={token}{query}"))
        status, _, body, rest = support.read_http_response(sock, 5)
        if status != 101:
            sock.close()
            raise ConnectionError(f"presence upgrade refused: {status} {body!r}")
        return sock, rest

    sock, rest = server.host.call(connect)
    ws = support.RawWebSocket.__new__(support.RawWebSocket)
    ws.sock, ws.buffer = sock, rest
    return ws


def room_socket(server: netns.NsServer, token: str):
    """A raw WebSocket client on /v1/ws, connected from inside the server host."""
    import support

    def connect():
        return support.RawWebSocket(server.port, token)

    return server.host.call(connect)


def recv_type(ws, frame_type: str, timeout: float = 5.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        frame = ws.recv_json(max(0.05, deadline - time.monotonic()))
        if frame.get("type") == frame_type:
            return frame
        if time.monotonic() > deadline:
            raise AssertionError(f"no {frame_type} frame within {timeout}s (last: {frame})")


def wav_rms(path: Path) -> tuple[float, float]:
    """(seconds, RMS of 16-bit samples) of a mono WAV."""
    import struct
    import wave
    with wave.open(str(path), "rb") as recording:
        frames = recording.getnframes()
        rate = recording.getframerate()
        width = recording.getsampwidth()
        assert width == 2, f"{path}: {width}-byte samples"
        samples = struct.unpack(f"<{frames * recording.getnchannels()}h", recording.readframes(frames))
    if not samples:
        return 0.0, 0.0
    return frames / rate, (sum(s * s for s in samples) / len(samples)) ** 0.5

