/*
 * Kafka record batches (message format v2) into Arrow-style columns, without an object per
 * record. Loaded with ctypes by consumer_sdk/records/record_columns.py; built by setuptools as a plain
 * shared library (no Python API is used here).
 *
 * A record batch is a 61-byte header followed by its records, each:
 *   length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 *   keyLength varint, key, valueLength varint, value,
 *   headerCount varint, then per header: keyLength varint, key, valueLength varint, value
 * (varints are zigzag-encoded; a length of -1 is null).
 *
 * kar_frame finds where whole records end in a window of a section inflated piece by piece.
 * kar_measure walks a records section and adds up what kar_decode will need, so the caller
 * allocates every column exactly once; kar_decode then fills the columns. Both stop with a
 * negative code on a malformed section instead of reading past its end: a record whose offset
 * delta lies outside [0, last_delta] (the batch's own range), a header key that is not UTF-8
 * (it lands in a string column), or an offset or timestamp that overflows int64.
 */
#include <stdint.h>
#include <string.h>

#define KAR_TRUNCATED -1
#define KAR_OVERFLOW -2
#define KAR_OFFSET_RANGE -3
#define KAR_BAD_UTF8 -4
#define KAR_TIMESTAMP_RANGE -5

typedef struct {
    int64_t records;      /* records at or past min_offset */
    int64_t key_bytes;
    int64_t value_bytes;
    int64_t headers;
    int64_t header_key_bytes;
    int64_t header_value_bytes;
} kar_sizes;

typedef struct {
    int64_t *offsets;
    int64_t *timestamps;
    int32_t *key_offsets;         /* records + 1 */
    uint8_t *key_valid;           /* one byte per record: 1 = not null */
    uint8_t *key_data;
    int32_t *value_offsets;       /* records + 1 */
    uint8_t *value_valid;
    uint8_t *value_data;
    int32_t *header_offsets;      /* records + 1: each record's first header */
    int32_t *header_key_offsets;  /* headers + 1 */
    uint8_t *header_key_data;
    int32_t *header_value_offsets;
    uint8_t *header_value_valid;
    uint8_t *header_value_data;
    kar_sizes filled;             /* how much of each column is written so far */
    kar_sizes capacity;
} kar_columns;

typedef struct {
    const uint8_t *at;
    const uint8_t *end;
} cursor;

static int read_varlong(cursor *c, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    while (c->at < c->end && shift < 64) {
        uint8_t byte = *c->at++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 0;
        }
        shift += 7;
    }
    return KAR_TRUNCATED;
}

/* A length-prefixed byte string: *start and *length (-1 for null) of its bytes. */
static int read_bytes(cursor *c, const uint8_t **start, int64_t *length) {
    if (read_varlong(c, length) < 0 || *length < -1) return KAR_TRUNCATED;
    *start = c->at;
    if (*length > 0) {
        if (*length > c->end - c->at) return KAR_TRUNCATED;
        c->at += *length;
    }
    return 0;
}

typedef struct {
    int64_t offset_delta;
    int64_t timestamp_delta;
    const uint8_t *key;
    int64_t key_length;
    const uint8_t *value;
    int64_t value_length;
    int64_t header_count;
    cursor headers;
} record_view;

/* Parses one record's fixed part; leaves the cursor after the whole record. */
static int read_record(cursor *c, record_view *r) {
    int64_t length;
    if (read_varlong(c, &length) < 0 || length < 0 || length > c->end - c->at)
        return KAR_TRUNCATED;
    cursor body = {c->at, c->at + length};
    c->at += length;
    if (body.at >= body.end) return KAR_TRUNCATED;
    body.at++; /* attributes: unused in v2 records */
    if (read_varlong(&body, &r->timestamp_delta) < 0) return KAR_TRUNCATED;
    if (read_varlong(&body, &r->offset_delta) < 0) return KAR_TRUNCATED;
    if (read_bytes(&body, &r->key, &r->key_length) < 0) return KAR_TRUNCATED;
    if (read_bytes(&body, &r->value, &r->value_length) < 0) return KAR_TRUNCATED;
    if (read_varlong(&body, &r->header_count) < 0 || r->header_count < 0) return KAR_TRUNCATED;
    r->headers = body;
    return 0;
}

/* Whether bytes[0..length) is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
static int is_utf8(const uint8_t *bytes, int64_t length) {
    int64_t i = 0;
    while (i < length) {
        uint8_t b = bytes[i];
        if (b < 0x80) { i++; continue; }
        int64_t n;
        uint8_t low = 0x80, high = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) n = 1;
        else if (b == 0xE0) { n = 2; low = 0xA0; }
        else if (b == 0xED) { n = 2; high = 0x9F; }
        else if (b >= 0xE1 && b <= 0xEF) n = 2;
        else if (b == 0xF0) { n = 3; low = 0x90; }
        else if (b >= 0xF1 && b <= 0xF3) n = 3;
        else if (b == 0xF4) { n = 3; high = 0x8F; }
        else return 0;
        if (n > length - i - 1) return 0;
        if (bytes[i + 1] < low || bytes[i + 1] > high) return 0;
        for (int64_t k = 2; k <= n; k++)
            if (bytes[i + k] < 0x80 || bytes[i + k] > 0xBF) return 0;
        i += n + 1;
    }
    return 1;
}

/* The record's offset, if its delta lies in the batch's range [0, last_delta]. */
static int record_offset(int64_t base_offset, int64_t last_delta, const record_view *r,
                         int64_t *offset) {
    if (r->offset_delta < 0 || r->offset_delta > last_delta) return KAR_OFFSET_RANGE;
    if (__builtin_add_overflow(base_offset, r->offset_delta, offset)) return KAR_OFFSET_RANGE;
    return 0;
}

static int read_header(cursor *c, const uint8_t **key, int64_t *key_length,
                       const uint8_t **value, int64_t *value_length) {
    if (read_bytes(c, key, key_length) < 0 || *key_length < 0) return KAR_TRUNCATED;
    if (!is_utf8(*key, *key_length)) return KAR_BAD_UTF8;
    return read_bytes(c, value, value_length);
}

int64_t kar_measure(const uint8_t *section, int64_t length, int64_t count,
                    int64_t base_offset, int64_t last_delta, int64_t base_timestamp,
                    int64_t use_log_append_time, int64_t min_offset, kar_sizes *sizes) {
    cursor c = {section, section + length};
    for (int64_t i = 0; i < count; i++) {
        record_view r;
        int64_t offset, timestamp;
        int problem;
        if (read_record(&c, &r) < 0) return KAR_TRUNCATED;
        if ((problem = record_offset(base_offset, last_delta, &r, &offset)) < 0) return problem;
        if (offset < min_offset) continue;
        if (!use_log_append_time &&
            __builtin_add_overflow(base_timestamp, r.timestamp_delta, &timestamp))
            return KAR_TIMESTAMP_RANGE;
        sizes->records++;
        if (r.key_length > 0) sizes->key_bytes += r.key_length;
        if (r.value_length > 0) sizes->value_bytes += r.value_length;
        for (int64_t h = 0; h < r.header_count; h++) {
            const uint8_t *hk, *hv;
            int64_t hk_len, hv_len;
            if ((problem = read_header(&r.headers, &hk, &hk_len, &hv, &hv_len)) < 0)
                return problem;
            sizes->headers++;
            sizes->header_key_bytes += hk_len;
            if (hv_len > 0) sizes->header_value_bytes += hv_len;
        }
    }
    return sizes->records;
}

/* A window of a records section inflated piece by piece: how many of at most max_count records
 * lie wholly in [0, length) and take, at fixed_bytes each on top of their own bytes, no more
 * than budget (the first whole record always counts, so a window moves on). *bytes gets what
 * those records take of the window, *max_delta their largest offset delta (-1 for none). A
 * record cut by the window's end is left for the next window. Returns the count, or
 * KAR_TRUNCATED when a record does not parse (a length that is no varint or below zero). */
int64_t kar_frame(const uint8_t *window, int64_t length, int64_t max_count, int64_t fixed_bytes,
                  int64_t budget, int64_t *bytes, int64_t *max_delta) {
    cursor c = {window, window + length};
    int64_t count = 0;
    *bytes = 0;
    *max_delta = -1;
    while (count < max_count && c.at < c.end) {
        cursor probe = c;
        int64_t record_length;
        if (read_varlong(&probe, &record_length) < 0) {
            if (c.end - c.at < 10) break; /* the window ends inside the length */
            return KAR_TRUNCATED;
        }
        if (record_length < 0) return KAR_TRUNCATED;
        if (record_length > probe.end - probe.at) break;
        int64_t taken = (int64_t)(probe.at - c.at) + record_length;
        if (count > 0 && *bytes + taken > budget - (count + 1) * fixed_bytes) break;
        record_view r;
        if (read_record(&c, &r) < 0) return KAR_TRUNCATED;
        if (r.offset_delta > *max_delta) *max_delta = r.offset_delta;
        *bytes += taken;
        count++;
    }
    return count;
}

static int append(uint8_t *data, int32_t *offsets, uint8_t *valid, int64_t index,
                  int64_t *filled, int64_t capacity, const uint8_t *bytes, int64_t length) {
    if (length > 0) {
        if (*filled + length > capacity || *filled + length > INT32_MAX) return KAR_OVERFLOW;
        memcpy(data + *filled, bytes, (size_t)length);
        *filled += length;
    }
    if (valid != NULL) valid[index] = length >= 0;
    offsets[index + 1] = (int32_t)*filled;
    return 0;
}

/* Appends the records at or past min_offset to the columns; returns how many, or < 0.
 * With use_log_append_time, log_append_time is every record's timestamp (LogAppendTime
 * batches: the broker's maxTimestamp, whatever its value). */
int64_t kar_decode(const uint8_t *section, int64_t length, int64_t count,
                   int64_t base_offset, int64_t last_delta, int64_t base_timestamp,
                   int64_t use_log_append_time, int64_t log_append_time, int64_t min_offset,
                   kar_columns *out) {
    cursor c = {section, section + length};
    kar_sizes *f = &out->filled;
    kar_sizes *cap = &out->capacity;
    int64_t appended = 0;
    if (f->records == 0) {
        out->key_offsets[0] = out->value_offsets[0] = 0;
        out->header_offsets[0] = out->header_key_offsets[0] = out->header_value_offsets[0] = 0;
    }
    for (int64_t i = 0; i < count; i++) {
        record_view r;
        int64_t offset, timestamp;
        int problem;
        if (read_record(&c, &r) < 0) return KAR_TRUNCATED;
        if ((problem = record_offset(base_offset, last_delta, &r, &offset)) < 0) return problem;
        if (offset < min_offset) continue;
        int64_t n = f->records;
        if (n >= cap->records) return KAR_OVERFLOW;
        if (use_log_append_time)
            timestamp = log_append_time;
        else if (__builtin_add_overflow(base_timestamp, r.timestamp_delta, &timestamp))
            return KAR_TIMESTAMP_RANGE;
        out->offsets[n] = offset;
        out->timestamps[n] = timestamp;
        if (append(out->key_data, out->key_offsets, out->key_valid, n, &f->key_bytes,
                   cap->key_bytes, r.key, r.key_length) < 0)
            return KAR_OVERFLOW;
        if (append(out->value_data, out->value_offsets, out->value_valid, n, &f->value_bytes,
                   cap->value_bytes, r.value, r.value_length) < 0)
            return KAR_OVERFLOW;
        for (int64_t h = 0; h < r.header_count; h++) {
            const uint8_t *hk, *hv;
            int64_t hk_len, hv_len;
            if ((problem = read_header(&r.headers, &hk, &hk_len, &hv, &hv_len)) < 0)
                return problem;
            int64_t m = f->headers;
            if (m >= cap->headers) return KAR_OVERFLOW;
            if (append(out->header_key_data, out->header_key_offsets, NULL, m,
                       &f->header_key_bytes, cap->header_key_bytes, hk, hk_len) < 0)
                return KAR_OVERFLOW;
            if (append(out->header_value_data, out->header_value_offsets,
                       out->header_value_valid, m, &f->header_value_bytes,
                       cap->header_value_bytes, hv, hv_len) < 0)
                return KAR_OVERFLOW;
            f->headers++;
        }
        out->header_offsets[n + 1] = (int32_t)f->headers;
        f->records++;
        appended++;
    }
    return appended;
}

/* CRC-32C (Castagnoli), as a v2 batch header carries it over attributes..end. */
static uint32_t crc_table[8][256];
static int crc_ready = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        crc_table[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    crc_ready = 1;
}

/* The table-driven CRC, for any CPU; exported so a test can hold the fast path to it. */
uint32_t kar_crc32c_portable(const uint8_t *data, int64_t length) {
    if (!crc_ready) crc_init();
    uint32_t crc = 0xFFFFFFFFu;
    while (length >= 8) { /* slicing-by-8 */
        uint32_t low = crc ^ ((uint32_t)data[0] | (uint32_t)data[1] << 8 |
                              (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24);
        crc = crc_table[7][low & 0xff] ^ crc_table[6][(low >> 8) & 0xff] ^
              crc_table[5][(low >> 16) & 0xff] ^ crc_table[4][low >> 24] ^
              crc_table[3][data[4]] ^ crc_table[2][data[5]] ^ crc_table[1][data[6]] ^
              crc_table[0][data[7]];
        data += 8;
        length -= 8;
    }
    while (length-- > 0) crc = (crc >> 8) ^ crc_table[0][(crc ^ *data++) & 0xff];
    return crc ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* SSE4.2's crc32 instruction computes exactly this polynomial, 8 bytes at a time: about four
 * times the table's speed, and a 16 MiB batch is checked once per fetch. Compiled for that
 * target only here and chosen at run time, so the library still loads on a CPU without it. */
__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(const uint8_t *data, int64_t length) {
    uint64_t crc = 0xFFFFFFFFu;
    while (length >= 8) {
        uint64_t word;
        memcpy(&word, data, 8); /* unaligned load; little-endian, as the CRC wants */
        crc = __builtin_ia32_crc32di(crc, word);
        data += 8;
        length -= 8;
    }
    uint32_t crc32 = (uint32_t)crc;
    while (length-- > 0) crc32 = __builtin_ia32_crc32qi(crc32, *data++);
    return crc32 ^ 0xFFFFFFFFu;
}
#endif

uint32_t kar_crc32c(const uint8_t *data, int64_t length) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("sse4.2")) return crc32c_sse42(data, length);
#endif
    return kar_crc32c_portable(data, length);
}
