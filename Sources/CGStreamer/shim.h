#ifndef CS_GSTREAMER_SHIM_H
#define CS_GSTREAMER_SHIM_H
/* CallingMedia's view of GStreamer. Swift cannot call C variadic functions (g_object_set,
 * g_signal_emit_by_name) or GLib's type macros, so the few it needs are wrapped here with fixed
 * signatures; everything else is called directly. */
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/app/app.h>
#define GST_USE_UNSTABLE_API
#include <gst/webrtc/webrtc.h>

static inline void cs_set_string(gpointer object, const char *name, const char *value) { g_object_set(object, name, value, NULL); }
static inline void cs_set_bool(gpointer object, const char *name, gboolean value) { g_object_set(object, name, value, NULL); }
static inline void cs_set_int(gpointer object, const char *name, gint value) { g_object_set(object, name, value, NULL); }
static inline void cs_set_uint(gpointer object, const char *name, guint value) { g_object_set(object, name, value, NULL); }
static inline void cs_set_uint64(gpointer object, const char *name, guint64 value) { g_object_set(object, name, value, NULL); }
static inline void cs_set_double(gpointer object, const char *name, gdouble value) { g_object_set(object, name, value, NULL); }
static inline void cs_set_caps(gpointer object, const char *name, GstCaps *value) { g_object_set(object, name, value, NULL); }

/* Enum and int properties read as int. */
static inline gint cs_get_int(gpointer object, const char *name) { gint value = 0; g_object_get(object, name, &value, NULL); return value; }
/* Caller frees with g_free. */
static inline gchar *cs_get_string(gpointer object, const char *name) { gchar *value = NULL; g_object_get(object, name, &value, NULL); return value; }
/* Boxed or object properties; caller releases (gst_webrtc_session_description_free, gst_object_unref…). */
static inline gpointer cs_get_pointer(gpointer object, const char *name) { gpointer value = NULL; g_object_get(object, name, &value, NULL); return value; }

static inline gboolean cs_has_property(gpointer object, const char *name) {
    return g_object_class_find_property(G_OBJECT_GET_CLASS(object), name) != NULL;
}
static inline const char *cs_type_name(gpointer object) { return G_OBJECT_TYPE_NAME(object); }

static inline void cs_webrtc_create_offer(GstElement *webrtc, GstPromise *promise) { g_signal_emit_by_name(webrtc, "create-offer", NULL, promise); }
/* An offer with the given create-offer options (e.g. "ice-restart" TRUE for new ICE credentials). */
static inline void cs_webrtc_create_offer_with(GstElement *webrtc, GstStructure *options, GstPromise *promise) { g_signal_emit_by_name(webrtc, "create-offer", options, promise); }
static inline void cs_webrtc_create_answer(GstElement *webrtc, GstPromise *promise) { g_signal_emit_by_name(webrtc, "create-answer", NULL, promise); }
static inline void cs_webrtc_set_local_description(GstElement *webrtc, GstWebRTCSessionDescription *description, GstPromise *promise) {
    g_signal_emit_by_name(webrtc, "set-local-description", description, promise);
}
static inline void cs_webrtc_set_remote_description(GstElement *webrtc, GstWebRTCSessionDescription *description, GstPromise *promise) {
    g_signal_emit_by_name(webrtc, "set-remote-description", description, promise);
}
static inline void cs_webrtc_add_ice_candidate(GstElement *webrtc, guint mline, const char *candidate) {
    g_signal_emit_by_name(webrtc, "add-ice-candidate", mline, candidate);
}
static inline gboolean cs_webrtc_add_turn_server(GstElement *webrtc, const char *uri) {
    gboolean added = FALSE;
    g_signal_emit_by_name(webrtc, "add-turn-server", uri, &added);
    return added;
}
static inline void cs_webrtc_get_stats(GstElement *webrtc, GstPromise *promise) { g_signal_emit_by_name(webrtc, "get-stats", NULL, promise); }
/* Returns a new reference, or NULL when webrtcbin refuses (it logs why). */
static inline GstWebRTCDataChannel *cs_webrtc_create_data_channel(GstElement *webrtc, const char *label, GstStructure *options) {
    GstWebRTCDataChannel *channel = NULL;
    g_signal_emit_by_name(webrtc, "create-data-channel", label, options, &channel);
    return channel;
}

/* An audio transceiver that only receives (Opus, payload type `pt`): a call that sends no audio
 * still hears the other side. */
static inline void cs_webrtc_add_recvonly_audio(GstElement *webrtc, int pt) {
    gchar *text = g_strdup_printf("application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,"
                                  "encoding-params=(string)2,payload=%d", pt);
    GstCaps *caps = gst_caps_from_string(text);
    g_free(text);
    GstWebRTCRTPTransceiver *transceiver = NULL;
    g_signal_emit_by_name(webrtc, "add-transceiver", GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_RECVONLY, caps, &transceiver);
    gst_caps_unref(caps);
    if (transceiver) gst_object_unref(transceiver);
}

/* The structure held by a GValue, or NULL when it holds something else. */
static inline const GstStructure *cs_value_get_structure(const GValue *value) {
    return (value && G_VALUE_HOLDS(value, GST_TYPE_STRUCTURE)) ? gst_value_get_structure(value) : NULL;
}
/* The boxed GstWebRTCSessionDescription a promise reply holds under `field`, or NULL. */
static inline const GstWebRTCSessionDescription *cs_reply_description(const GstStructure *reply, const char *field) {
    const GValue *value = reply ? gst_structure_get_value(reply, field) : NULL;
    return (value && G_VALUE_HOLDS(value, GST_TYPE_WEBRTC_SESSION_DESCRIPTION)) ? g_value_get_boxed(value) : NULL;
}
/* The message of the GError a promise reply holds under "error", or NULL. */
static inline const char *cs_reply_error(const GstStructure *reply) {
    const GValue *value = reply ? gst_structure_get_value(reply, "error") : NULL;
    if (!value || !G_VALUE_HOLDS(value, G_TYPE_ERROR)) return NULL;
    const GError *error = g_value_get_boxed(value);
    return error ? error->message : NULL;
}

static inline GstMessageType cs_message_type(GstMessage *message) { return GST_MESSAGE_TYPE(message); }
static inline const char *cs_message_source_name(GstMessage *message) { return GST_MESSAGE_SRC_NAME(message); }
/* Whether the element has reached PLAYING (not merely been asked to), read under its object lock
 * as GStreamer writes it. */
static inline gboolean cs_element_is_playing(GstElement *element) {
    GST_OBJECT_LOCK(element);
    gboolean playing = GST_STATE(element) == GST_STATE_PLAYING;
    GST_OBJECT_UNLOCK(element);
    return playing;
}
static inline GstClockTime cs_buffer_pts(GstBuffer *buffer) { return GST_BUFFER_PTS(buffer); }
static inline void cs_buffer_set_pts(GstBuffer *buffer, GstClockTime pts, GstClockTime duration) {
    GST_BUFFER_PTS(buffer) = pts;
    GST_BUFFER_DURATION(buffer) = duration;
}
/* Any numeric GValue as a double (stats fields are a mix of int, uint64 and double); NAN otherwise. */
static inline gdouble cs_value_as_double(const GValue *value) {
    if (!value) return __builtin_nan("");
    switch (G_VALUE_TYPE(value)) {
    case G_TYPE_INT: return g_value_get_int(value);
    case G_TYPE_UINT: return g_value_get_uint(value);
    case G_TYPE_INT64: return (gdouble)g_value_get_int64(value);
    case G_TYPE_UINT64: return (gdouble)g_value_get_uint64(value);
    case G_TYPE_DOUBLE: return g_value_get_double(value);
    case G_TYPE_FLOAT: return g_value_get_float(value);
    default: return __builtin_nan("");
    }
}
static inline GType cs_stats_type_gtype(void) { return gst_webrtc_stats_type_get_type(); }
#endif
