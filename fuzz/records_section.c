/*
 * libFuzzer harness for consumer_sdk/records/native/kafka_records.c, built with AddressSanitizer and
 * UndefinedBehaviorSanitizer by fuzz/run.py. The first 32 bytes of an input are a batch's
 * parameters (record count, base offset, last offset delta, base timestamp, whether the
 * broker's time is used, min offset), the rest its records section, as the Python side hands
 * it over after inflating. Checked on every input, beyond the sanitizers' own checks:
 *  - what kar_measure counts never exceeds the input (so allocation follows the input),
 *  - kar_decode, given exactly the measured room, decodes exactly the measured records,
 *  - every decoded offset lies in [base, base + last_delta] and at or past min_offset,
 *  - the fast and the portable CRC-32C agree,
 *  - what kar_frame takes lies in the window, and framing just that prefix takes it again.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t records, key_bytes, value_bytes, headers, header_key_bytes, header_value_bytes;
} kar_sizes;

typedef struct {
    int64_t *offsets;
    int64_t *timestamps;
    int32_t *key_offsets;
    uint8_t *key_valid;
    uint8_t *key_data;
    int32_t *value_offsets;
    uint8_t *value_valid;
    uint8_t *value_data;
    int32_t *header_offsets;
    int32_t *header_key_offsets;
    uint8_t *header_key_data;
    int32_t *header_value_offsets;
    uint8_t *header_value_valid;
    uint8_t *header_value_data;
    kar_sizes filled;
    kar_sizes capacity;
} kar_columns;

int64_t kar_measure(const uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                    int64_t, kar_sizes *);
int64_t kar_decode(const uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                   int64_t, int64_t, kar_columns *);
int64_t kar_frame(const uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t *, int64_t *);
uint32_t kar_crc32c(const uint8_t *, int64_t);
uint32_t kar_crc32c_portable(const uint8_t *, int64_t);

#define PARAMETERS 32

static int64_t read64(const uint8_t *at) {
    uint64_t value;
    memcpy(&value, at, 8);
    return (int64_t)value;
}

/* Exactly n elements (at least one byte, so that even an empty column has an address). */
static void *room(int64_t n, size_t size) { return calloc((size_t)n + 1, size); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < PARAMETERS) return 0;
    if (kar_crc32c(data, (int64_t)size) != kar_crc32c_portable(data, (int64_t)size)) abort();
    int64_t count = (int64_t)(data[0] | data[1] << 8);
    int64_t base_offset = read64(data + 2);
    int64_t last_delta = (int64_t)(int32_t)(data[10] | data[11] << 8 | data[12] << 16 |
                                             (uint32_t)data[13] << 24);
    int64_t base_timestamp = read64(data + 14);
    int64_t use_log_append_time = data[22] & 1;
    int64_t log_append_time = read64(data + 23);
    int64_t skip = (int64_t)(data[31] % 8);
    int64_t min_offset = base_offset > INT64_MAX - skip ? base_offset : base_offset + skip;
    const uint8_t *section = data + PARAMETERS;
    int64_t length = (int64_t)size - PARAMETERS;

    int64_t budget = (int64_t)(data[31] >> 3) * 64, taken, max_delta;
    int64_t framed = kar_frame(section, length, count, 34, budget, &taken, &max_delta);
    if (framed >= 0) {
        int64_t again_taken, again_delta;
        if (framed > count || taken < 0 || taken > length || (framed == 0) != (taken == 0))
            abort();
        if (kar_frame(section, taken, count, 34, budget, &again_taken, &again_delta) != framed ||
            again_taken != taken || again_delta != max_delta)
            abort();
    }

    kar_sizes sizes = {0};
    if (kar_measure(section, length, count, base_offset, last_delta, base_timestamp,
                    use_log_append_time, min_offset, &sizes) < 0)
        return 0;
    int64_t bytes = sizes.key_bytes + sizes.value_bytes + sizes.header_key_bytes +
                    sizes.header_value_bytes;
    if (sizes.records > count || sizes.records > length || bytes > length ||
        sizes.headers > length)
        abort(); /* allocation would not follow the input */

    kar_columns out = {0};
    out.offsets = room(sizes.records, 8);
    out.timestamps = room(sizes.records, 8);
    out.key_offsets = room(sizes.records + 1, 4);
    out.key_valid = room(sizes.records, 1);
    out.key_data = room(sizes.key_bytes, 1);
    out.value_offsets = room(sizes.records + 1, 4);
    out.value_valid = room(sizes.records, 1);
    out.value_data = room(sizes.value_bytes, 1);
    out.header_offsets = room(sizes.records + 1, 4);
    out.header_key_offsets = room(sizes.headers + 1, 4);
    out.header_key_data = room(sizes.header_key_bytes, 1);
    out.header_value_offsets = room(sizes.headers + 1, 4);
    out.header_value_valid = room(sizes.headers, 1);
    out.header_value_data = room(sizes.header_value_bytes, 1);
    out.capacity = sizes;
    int64_t decoded = kar_decode(section, length, count, base_offset, last_delta,
                                 base_timestamp, use_log_append_time, log_append_time,
                                 min_offset, &out);
    if (decoded != sizes.records || memcmp(&out.filled, &sizes, sizeof sizes) != 0) abort();
    for (int64_t i = 0; i < decoded; i++) {
        int64_t offset = out.offsets[i];
        if (offset < base_offset || offset - base_offset > last_delta || offset < min_offset)
            abort();
    }
    free(out.offsets); free(out.timestamps); free(out.key_offsets); free(out.key_valid);
    free(out.key_data); free(out.value_offsets); free(out.value_valid); free(out.value_data);
    free(out.header_offsets); free(out.header_key_offsets); free(out.header_key_data);
    free(out.header_value_offsets); free(out.header_value_valid); free(out.header_value_data);
    return 0;
}
