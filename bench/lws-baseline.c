/*
 * A bare libwebsockets server doing the socket work of calling-server and nothing else: the
 * baseline every scenario of `calling-bench` is compared with (bench/README.md).
 *
 * Same library, same event loop (the libev plugin, LWS_SERVER_OPTION_LIBEV, as
 * Sources/CallingTransport/WebSocketServer.swift uses), same rx/tx buffer sizes. No JSON parser,
 * no tokens, no store: a WebSocket at /g/<room>/<peer> joins <room> and gets a welcome frame; then
 *   {"type":"ping"...}   is echoed to the sender (the pong),
 *   {"type":"chat"...}   gets a chat-ack with the room's next seq, and a chat frame to the others,
 *   anything else        (candidate, data) is forwarded unchanged to every other member.
 * The frames have the wire shapes of docs/protocol.md where the load generator looks at them, so
 * the generator verifies the baseline's replies the way it verifies the server's.
 * GET /page answers 200 with a body of --page-bytes bytes (the history scenario's baseline).
 * --idle-ping S --idle-hangup S set lws's own keep-alive (its retry and idle policy, PING S seconds
 * after the upgrade and after each PONG): the keepalive scenario's baseline.
 *
 * Built by calling-bench: gcc -O2 lws-baseline.c $(pkg-config --cflags --libs libwebsockets)
 * Prints "lws-baseline listening on port N" once it accepts connections.
 */
#include <libwebsockets.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_FRAME 65536
#define ROOM_BUCKETS 65536

/* A refcounted outbound message, shared by every receiver of a broadcast. */
struct msg {
	int refs;
	size_t len;
	unsigned char buf[]; /* LWS_PRE headroom, then the payload */
};

struct room;

struct pss {
	struct lws *wsi;
	struct room *room;
	struct pss *next; /* in the room */
	struct pss *prev;
	struct msg **queue; /* ring */
	unsigned int head, count, cap;
	unsigned char *rx; /* a frame lws delivered in pieces, until its last one */
	size_t rx_len, rx_cap;
	char peer[128];
};

struct room {
	char *name;
	struct room *next_in_bucket;
	struct pss *members;
	long seq;
};

static struct room *buckets[ROOM_BUCKETS];
static size_t page_bytes = 4096;
static unsigned char *page;

static unsigned int hash(const char *s)
{
	unsigned int h = 2166136261u;
	while (*s)
		h = (h ^ (unsigned char)*s++) * 16777619u;
	return h & (ROOM_BUCKETS - 1);
}

static struct room *room_named(const char *name)
{
	unsigned int b = hash(name);
	struct room *r;
	for (r = buckets[b]; r; r = r->next_in_bucket)
		if (!strcmp(r->name, name))
			return r;
	r = calloc(1, sizeof(*r));
	r->name = strdup(name);
	r->next_in_bucket = buckets[b];
	buckets[b] = r;
	return r;
}

static struct msg *msg_new(const void *data, size_t len)
{
	struct msg *m = malloc(sizeof(*m) + LWS_PRE + len);
	m->refs = 0;
	m->len = len;
	memcpy(m->buf + LWS_PRE, data, len);
	return m;
}

static void msg_release(struct msg *m)
{
	if (--m->refs == 0)
		free(m);
}

static void enqueue(struct pss *p, struct msg *m)
{
	if (p->count == p->cap) {
		unsigned int cap = p->cap ? p->cap * 2 : 4;
		struct msg **q = malloc(cap * sizeof(*q));
		for (unsigned int i = 0; i < p->count; i++)
			q[i] = p->queue[(p->head + i) % p->cap];
		free(p->queue);
		p->queue = q;
		p->head = 0;
		p->cap = cap;
	}
	p->queue[(p->head + p->count) % p->cap] = m;
	p->count++;
	m->refs++;
	lws_callback_on_writable(p->wsi);
}

/* Forwards to every other member; frees the message when nobody took it. */
static void broadcast(struct pss *from, struct msg *m)
{
	m->refs++;
	for (struct pss *p = from->room->members; p; p = p->next)
		if (p != from)
			enqueue(p, m);
	msg_release(m);
}

/* The string value after `key` (e.g. "\"client_id\":\""), up to the closing quote. */
static int field(const char *in, size_t len, const char *key, const char **value)
{
	size_t klen = strlen(key);
	for (size_t i = 0; i + klen <= len; i++) {
		if (!memcmp(in + i, key, klen)) {
			const char *start = in + i + klen, *end = start;
			while (end < in + len && *end != '"')
				end++;
			*value = start;
			return (int)(end - start);
		}
	}
	return -1;
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void chat(struct pss *p, const char *in, size_t len)
{
	static char out[MAX_FRAME + 512];
	const char *id, *text;
	int idlen = field(in, len, "\"client_id\":\"", &id);
	int textlen = field(in, len, "\"text\":\"", &text);
	if (idlen < 0 || textlen < 0 || idlen + textlen > MAX_FRAME)
		return;
	long seq = ++p->room->seq;
	long long ts = now_ms();
	int n = snprintf(out, sizeof(out), "{\"payload\":{\"client_id\":\"%.*s\",\"seq\":%ld,\"ts\":%lld},\"type\":\"chat-ack\"}",
			 idlen, id, seq, ts);
	enqueue(p, msg_new(out, (size_t)n));
	n = snprintf(out, sizeof(out),
		     "{\"from\":\"%s\",\"payload\":{\"client_id\":\"%.*s\",\"meta\":null,\"seq\":%ld,\"text\":\"%.*s\",\"ts\":%lld},\"type\":\"chat\"}",
		     p->peer, idlen, id, seq, textlen, text, ts);
	broadcast(p, msg_new(out, (size_t)n));
}

static struct msg *dequeue(struct pss *p)
{
	struct msg *m = p->queue[p->head];
	p->head = (p->head + 1) % p->cap;
	p->count--;
	return m;
}

/*
 * One write per WRITEABLE, as calling-server does (WebSocketServer.swift, writeCoalesced): a lone
 * frame goes out with lws_write(LWS_WRITE_TEXT); several queued frames are framed here (server
 * frames are unmasked, RFC 6455 5.2) and go out together as raw bytes, up to COALESCE bytes, the
 * server's default max_coalesced_bytes. Without it the baseline would pay one syscall per frame
 * where the server pays one per batch, and the ratio would compare write strategies, not work.
 */
#define COALESCE 65536
static int write_queued(struct lws *wsi, struct pss *p)
{
	static unsigned char batch[LWS_PRE + COALESCE];
	if (p->count == 1) {
		struct msg *m = dequeue(p);
		int n = lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT);
		msg_release(m);
		return n < 0 ? -1 : 0;
	}
	size_t used = 0;
	while (p->count) {
		struct msg *m = p->queue[p->head];
		size_t header = m->len < 126 ? 2 : m->len < 65536 ? 4 : 10;
		if (used && used + header + m->len > COALESCE)
			break;
		if (!used && header + m->len > COALESCE) { /* too large to batch: alone */
			dequeue(p);
			int n = lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT);
			msg_release(m);
			return n < 0 ? -1 : 0;
		}
		unsigned char *out = batch + LWS_PRE + used;
		out[0] = 0x81;
		if (m->len < 126) {
			out[1] = (unsigned char)m->len;
		} else {
			out[1] = 126;
			out[2] = (unsigned char)(m->len >> 8);
			out[3] = (unsigned char)(m->len & 0xff);
		}
		memcpy(out + header, m->buf + LWS_PRE, m->len);
		used += header + m->len;
		dequeue(p);
		msg_release(m);
	}
	return lws_write(wsi, batch + LWS_PRE, used, LWS_WRITE_HTTP) < (int)used ? -1 : 0;
}

static void handle_frame(struct pss *p, const char *in, size_t len)
{
	if (len >= 15 && !memcmp(in, "{\"type\":\"ping\"", 14))
		enqueue(p, msg_new(in, len));
	else if (len >= 15 && !memcmp(in, "{\"type\":\"chat\"", 14))
		chat(p, in, len);
	else
		broadcast(p, msg_new(in, len));
}

static int serve_page(struct lws *wsi)
{
	unsigned char headers[LWS_PRE + 512], *start = headers + LWS_PRE, *pos = start, *end = headers + sizeof(headers);
	if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, "application/json", (lws_filepos_t)page_bytes, &pos, end) ||
	    lws_finalize_write_http_header(wsi, start, &pos, end))
		return -1;
	if (lws_write(wsi, page + LWS_PRE, page_bytes, LWS_WRITE_HTTP_FINAL) != (int)page_bytes)
		return -1;
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	struct pss *p = user;
	char uri[512];

	switch (reason) {
	case LWS_CALLBACK_HTTP:
		if (len >= 5 && !strncmp(in, "/page", 5))
			return serve_page(wsi);
		lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL);
		return -1;

	case LWS_CALLBACK_ESTABLISHED: {
		memset(p, 0, sizeof(*p));
		p->wsi = wsi;
		if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0 || strncmp(uri, "/g/", 3))
			return -1;
		char *name = uri + 3, *slash = strchr(name, '/');
		if (!slash)
			return -1;
		*slash = '\0';
		snprintf(p->peer, sizeof(p->peer), "%s", slash + 1);
		p->room = room_named(name);
		p->next = p->room->members;
		if (p->next)
			p->next->prev = p;
		p->room->members = p;
		char out[512];
		int n = snprintf(out, sizeof(out), "{\"payload\":{\"peer_id\":\"%s\",\"room_id\":\"%s\"},\"type\":\"welcome\"}",
				 p->peer, p->room->name);
		enqueue(p, msg_new(out, (size_t)n));
		return 0;
	}

	case LWS_CALLBACK_RECEIVE:
		if (!p->room)
			return 0;
		/* lws hands over a frame in pieces when it straddles two reads of the socket (pipelined
		 * load makes that common): keep the pieces and act on the whole frame, as the server does. */
		if (!lws_is_first_fragment(wsi) || !lws_is_final_fragment(wsi) || p->rx_len) {
			if (p->rx_len + len > MAX_FRAME)
				return -1;
			if (p->rx_len + len > p->rx_cap) {
				p->rx_cap = MAX_FRAME;
				p->rx = realloc(p->rx, p->rx_cap);
			}
			memcpy(p->rx + p->rx_len, in, len);
			p->rx_len += len;
			if (!lws_is_final_fragment(wsi))
				return 0;
			handle_frame(p, (const char *)p->rx, p->rx_len);
			p->rx_len = 0;
			return 0;
		}
		handle_frame(p, in, len);
		return 0;

	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (!p->count)
			return 0;
		if (write_queued(wsi, p) < 0)
			return -1;
		if (p->count)
			lws_callback_on_writable(wsi);
		return 0;

	case LWS_CALLBACK_CLOSED:
		if (p->room) {
			if (p->prev)
				p->prev->next = p->next;
			else
				p->room->members = p->next;
			if (p->next)
				p->next->prev = p->prev;
			p->room = NULL;
		}
		while (p->count) {
			msg_release(p->queue[p->head]);
			p->head = (p->head + 1) % p->cap;
			p->count--;
		}
		free(p->queue);
		p->queue = NULL;
		free(p->rx);
		p->rx = NULL;
		return 0;

	default:
		return 0;
	}
}

int main(int argc, char **argv)
{
	int port = 0, idle_ping = 0, idle_hangup = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--page-bytes"))
			page_bytes = (size_t)atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--idle-ping"))
			idle_ping = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--idle-hangup"))
			idle_hangup = atoi(argv[i + 1]);
		else {
			fprintf(stderr, "usage: %s [--port P] [--page-bytes N] [--idle-ping S --idle-hangup S]\n", argv[0]);
			return 64;
		}
	}
	page = malloc(LWS_PRE + page_bytes);
	memset(page + LWS_PRE, 'x', page_bytes);

	/* Each peer is one descriptor: as calling-server does, raise the soft limit to the hard one. */
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);

	lws_set_log_level(LLL_ERR, NULL);
	static struct lws_protocols protocols[] = {
		{"bench", callback, sizeof(struct pss), MAX_FRAME + 1024, 0, NULL, MAX_FRAME + 1024},
		{NULL, NULL, 0, 0, 0, NULL, 0},
	};
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.port = port;
	info.iface = "127.0.0.1";
	info.protocols = protocols;
	info.gid = -1;
	info.uid = -1;
	info.max_http_header_data = 8192;
	info.pt_serv_buf_size = 16384;
	info.timeout_secs = 20;
	info.fd_limit_per_thread = (unsigned int)(rl.rlim_cur > 1024 ? rl.rlim_cur : 1024);
	info.options = LWS_SERVER_OPTION_LIBEV | LWS_SERVER_OPTION_DISABLE_IPV6;
	static lws_retry_bo_t idle_policy;
	if (idle_ping > 0) {
		idle_policy.secs_since_valid_ping = (uint16_t)idle_ping;
		idle_policy.secs_since_valid_hangup = (uint16_t)(idle_hangup > idle_ping ? idle_hangup : idle_ping + 1);
		info.retry_and_idle_policy = &idle_policy;
	}
	struct lws_context *context = lws_create_context(&info);
	if (!context) {
		fprintf(stderr, "lws-baseline: cannot create the context\n");
		return 1;
	}
	struct lws_vhost *vhost = lws_get_vhost_by_name(context, "default");
	printf("lws-baseline listening on port %d\n", vhost ? lws_get_vhost_listen_port(vhost) : port);
	fflush(stdout);
	signal(SIGPIPE, SIG_IGN);
	/* With libev, lws_service runs the loop until it is stopped; SIGTERM (default action) ends
	 * the process, which is all a benchmark baseline needs. */
	while (lws_service(context, 0) >= 0)
		;
	lws_context_destroy(context);
	return 0;
}
