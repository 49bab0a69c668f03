/*
 * manifest.cc — the snapshot MANIFEST codec: manifest.h's C API over the
 * flatc-generated C++ of manifest.fbs.  This is the only C++ in store/; it
 * is C++ only because flatc emits C++, and it keeps C++ from leaking out:
 * every exception is caught at the API boundary and turned into -ENOMEM or
 * -EBADMSG/-EINVAL, and all memory handed to C comes from malloc.
 *
 * FILE LAYOUT (all integers little-endian)
 *
 *   0        4        8                                    n        n+8
 *   +--------+--------+------------------------------------+--------+
 *   | root   | "TLMF" | vtables, Manifest table, shards,   | xxh3   |
 *   | uoffset| file id| strings (FlatBuffers, manifest.fbs) | 64 LE  |
 *   +--------+--------+------------------------------------+--------+
 *   \______________ FlatBuffer: n bytes ________________/
 *
 *   The trailer is XXH3_64bits of bytes [0, n).  A file is refused when it is
 *   shorter than 16 bytes or longer than MANIFEST_MAX_BYTES.
 *
 * DECODING trusts nothing, cheapest check first: length; file identifier
 * (so that "this is not a manifest" reads as such, not as a bad checksum);
 * trailer checksum; the FlatBuffers verifier (every offset, length and
 * alignment in bounds); then every field, with the same check_fields() that
 * store__manifest_encode() runs, so that whatever encode writes, decode accepts, and
 * whatever decode accepts, encode reproduces.  The verifier and the reads
 * after it assume an 8-byte aligned buffer; a misaligned input is copied.
 * Fields the C API does not know (later additions) are verified
 * structurally and otherwise ignored.
 *
 * Every refusal writes one sentence into why naming the field and the bad
 * value: "manifest: shards[3].bytes is 100 but 64 + 5 entries x 12 bytes =
 * 124".  Strings from the input are quoted with non-printable bytes escaped.
 *
 * THREAD SAFETY: no global state.  Any number of threads may encode and
 * decode at once; each call reads only its arguments and writes only its
 * outputs.  Neither call blocks beyond malloc.
 */
#include "manifest.h"

#include "manifest_generated.h"

#include <errno.h>
#include <inttypes.h>
#include <new>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#include <xxhash.h>

namespace fbm = tl::manifest;

namespace
{

constexpr size_t TRAILER_BYTES = 8;
constexpr size_t MIN_BYTES = 4 + 4 + TRAILER_BYTES; /* root offset, identifier, trailer */
constexpr size_t NAME_MAX_LEN = 63;                 /* char[64] with its NUL */
constexpr uint32_t MAX_TABLES = 100000; /* verifier budget, far above any real manifest */

static_assert(sizeof(((manifest_t *)nullptr)->meta.model_name) == NAME_MAX_LEN + 1, "name size");
static_assert(sizeof(((manifest_shard_t *)nullptr)->file) == NAME_MAX_LEN + 1, "file size");
static_assert((int)STORE_MODEL_LR == (int)fbm::ModelKind_LR &&
                  (int)STORE_MODEL_FM == (int)fbm::ModelKind_FM &&
                  (int)STORE_MODEL_FFM == (int)fbm::ModelKind_FFM &&
                  (int)STORE_MODEL_DNN == (int)fbm::ModelKind_DNN &&
                  fbm::ModelKind_MAX == fbm::ModelKind_DNN,
              "ModelKind values must equal store_model_kind_t");
static_assert((int)STORE_DTYPE_F32 == (int)fbm::ValueType_F32 &&
                  (int)STORE_DTYPE_F16 == (int)fbm::ValueType_F16 &&
                  fbm::ValueType_MAX == fbm::ValueType_F16,
              "ValueType values must equal store_dtype_t");
static_assert((int)MANIFEST_KIND_FULL == (int)fbm::VersionKind_FULL &&
                  (int)MANIFEST_KIND_DELTA == (int)fbm::VersionKind_DELTA &&
                  fbm::VersionKind_MAX == fbm::VersionKind_DELTA,
              "VersionKind values must equal manifest_kind_t");
static_assert(sizeof(((manifest_t *)nullptr)->producer) == NAME_MAX_LEN + 1, "producer size");

/* Where a refusal's sentence goes; why may be NULL. */
struct Why {
    char *buf;
    size_t len;
};

__attribute__((cold)) void vsay(Why &w, const char *fmt, va_list ap)
{
    if (w.buf && w.len > 0)
        vsnprintf(w.buf, w.len, fmt, ap);
}

/* Writes the sentence and returns false: for checks that return bool. */
__attribute__((cold, format(printf, 2, 3))) bool say(Why &w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(w, fmt, ap);
    va_end(ap);
    return false;
}

/* Writes the sentence and returns code: for refusals that end a call. */
__attribute__((cold, format(printf, 3, 4))) int fail(Why &w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(w, fmt, ap);
    va_end(ap);
    return code;
}

/* A string from either side: a FlatBuffers string (may be absent, may hold
 * any bytes) or a fixed char[64] from the C struct (may lack its NUL). */
struct Str {
    const char *p;
    size_t n;
    bool present;
    bool unterminated; /* C side: no NUL within the 64-byte field */
};

Str str_of(const flatbuffers::String *s)
{
    if (!s)
        return Str{"", 0, false, false};
    return Str{s->c_str(), s->size(), true, false};
}

template <size_t N> Str str_of(const char (&a)[N])
{
    size_t n = strnlen(a, N);
    return Str{a, n, true, n == N};
}

/* Writes s as a C string literal, at most 40 bytes of it, into out. */
struct Quoted {
    char s[2 + 40 * 4 + 3 + 1];
};

Quoted quote(const Str &s)
{
    Quoted q;
    size_t o = 0;
    q.s[o++] = '"';
    size_t shown = s.n < 40 ? s.n : 40;
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            q.s[o++] = (char)c;
        } else {
            snprintf(q.s + o, 5, "\\x%02x", c);
            o += 4;
        }
    }
    q.s[o++] = '"';
    if (shown < s.n) {
        memcpy(q.s + o, "...", 3);
        o += 3;
    }
    q.s[o] = '\0';
    return q;
}

bool name_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

/* Checks a model or file name (or a param key, a dense array name): present,
 * 1..max bytes, [A-Za-z0-9_.-] only. */
bool check_name(const char *field, const Str &s, Why &w, size_t max = NAME_MAX_LEN)
{
    if (!s.present)
        return say(w, "manifest: %s is missing", field);
    if (s.unterminated)
        return say(w, "manifest: %s %s has no NUL within its %zu bytes", field, quote(s).s,
                   max + 1);
    if (s.n == 0)
        return say(w, "manifest: %s is empty", field);
    if (s.n > max)
        return say(w, "manifest: %s %s is %zu bytes long, over the %zu-byte limit", field,
                   quote(s).s, s.n, max);
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if (!name_char_ok(c))
            return say(w,
                       "manifest: %s %s has byte 0x%02x at offset %zu; only [A-Za-z0-9_.-] "
                       "are allowed",
                       field, quote(s).s, c, i);
    }
    return true;
}

bool str_eq(const Str &a, const char *b)
{
    size_t n = strlen(b);
    return a.n == n && memcmp(a.p, b, n) == 0;
}

bool str_same(const Str &a, const Str &b)
{
    return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

/* The manifest's fields, read from a FlatBuffer or from a manifest_t.  Enums
 * are raw integers: on either side they may hold any value. */
struct Head {
    uint32_t format_version;
    Str model_name;
    uint64_t model_kind;
    uint64_t version;
    uint32_t value_floats;
    uint64_t value_type;
    uint32_t shard_count;
    bool shards_present; /* the shards list exists */
    size_t shards_len;   /* its length */
    uint64_t kind;       /* VersionKind, raw */
    uint64_t parent_version;
    Str producer;        /* may be absent */
};

struct Shard {
    uint32_t index;
    Str file;
    uint64_t entries;
    uint64_t bytes;
    uint64_t deletes;
};

/* A param and a dense file, read from either side. */
struct Param {
    Str key;
    Str value;
};

struct Dense {
    Str name;
    Str file;
    uint64_t bytes;
};

/* The rules for params and dense files (manifest.h).  n_params / n_dense are
 * the list lengths; shard_at(i) for i < shard_count gives the shard files
 * (dense files may not reuse their names).  Returns true or false with why. */
template <class ParamAt, class DenseAt, class ShardAt>
bool check_extras(size_t n_params, ParamAt param_at, size_t n_dense, DenseAt dense_at,
                  uint32_t shard_count, ShardAt shard_at, Why &w)
{
    if (n_params > STORE_MAX_PARAMS)
        return say(w, "manifest: params has %zu entries, over the limit of %d", n_params,
                   STORE_MAX_PARAMS);
    for (size_t i = 0; i < n_params; i++) {
        const Param p = param_at(i);
        char field[32];
        snprintf(field, sizeof field, "params[%zu].key", i);
        if (!check_name(field, p.key, w, STORE_PARAM_KEY_MAX - 1))
            return false;
        for (size_t j = 0; j < i; j++)
            if (str_same(param_at(j).key, p.key))
                return say(w, "manifest: %s %s is also params[%zu].key", field, quote(p.key).s, j);
        if (!p.value.present)
            return say(w, "manifest: params[%zu].value is missing", i);
        if (p.value.unterminated || p.value.n > STORE_PARAM_VALUE_MAX - 1)
            return say(w, "manifest: params[%zu].value %s is over the %d-byte limit", i,
                       quote(p.value).s, STORE_PARAM_VALUE_MAX - 1);
        for (size_t c = 0; c < p.value.n; c++) {
            unsigned char ch = (unsigned char)p.value.p[c];
            if (ch < 0x20 || ch > 0x7e)
                return say(w,
                           "manifest: params[%zu].value %s has byte 0x%02x at offset %zu; only "
                           "printable ASCII is allowed",
                           i, quote(p.value).s, ch, c);
        }
    }
    if (n_dense > STORE_MAX_DENSE)
        return say(w, "manifest: dense_files has %zu entries, over the limit of %d", n_dense,
                   STORE_MAX_DENSE);
    for (size_t i = 0; i < n_dense; i++) {
        const Dense d = dense_at(i);
        char field[40];
        snprintf(field, sizeof field, "dense_files[%zu].name", i);
        if (!check_name(field, d.name, w, STORE_DENSE_NAME_MAX - 1))
            return false;
        snprintf(field, sizeof field, "dense_files[%zu].file", i);
        if (!check_name(field, d.file, w))
            return false;
        if (d.file.p[0] == '.')
            return say(w, "manifest: %s %s starts with '.'", field, quote(d.file).s);
        if (str_eq(d.file, MANIFEST_FILE_NAME))
            return say(w, "manifest: %s is \"%s\", the manifest's own name", field,
                       MANIFEST_FILE_NAME);
        for (size_t j = 0; j < i; j++) {
            const Dense e = dense_at(j);
            if (str_same(e.name, d.name))
                return say(w, "manifest: dense_files[%zu].name %s is also dense_files[%zu].name",
                           i, quote(d.name).s, j);
            if (str_same(e.file, d.file))
                return say(w, "manifest: %s %s is also dense_files[%zu].file", field,
                           quote(d.file).s, j);
        }
        for (uint32_t j = 0; j < shard_count; j++)
            if (str_same(shard_at(j).file, d.file))
                return say(w, "manifest: %s %s is also shards[%" PRIu32 "].file", field,
                           quote(d.file).s, j);
        const uint64_t max_bytes = DENSE_HEADER_BYTES + 4 * STORE_DENSE_MAX_FLOATS;
        if (d.bytes < DENSE_HEADER_BYTES + 4 || d.bytes > max_bytes ||
            (d.bytes - DENSE_HEADER_BYTES) % 4 != 0)
            return say(w,
                       "manifest: dense_files[%zu].bytes is %" PRIu64 ", expected %u + 4 x count "
                       "with count 1..%" PRIu64,
                       i, d.bytes, DENSE_HEADER_BYTES, (uint64_t)STORE_DENSE_MAX_FLOATS);
    }
    return true;
}

/* Every rule of manifest.h, in field order.  shard_at(i) returns shard i;
 * it is called only after the list's length equals a valid shard_count.
 * Returns true, or false with why filled. */
template <class ShardAt> bool check_fields(const Head &h, ShardAt shard_at, Why &w)
{
    if (h.format_version != MANIFEST_FORMAT_VERSION &&
        h.format_version != MANIFEST_FORMAT_VERSION_DELTA)
        return say(w, "manifest: format_version is %" PRIu32 ", expected %d (full) or %d (delta)",
                   h.format_version, MANIFEST_FORMAT_VERSION, MANIFEST_FORMAT_VERSION_DELTA);
    if (h.kind > fbm::VersionKind_MAX)
        return say(w, "manifest: version_kind is %" PRIu64 ", expected 0..%d (FULL, DELTA)",
                   h.kind, (int)fbm::VersionKind_MAX);
    const bool delta = h.kind == fbm::VersionKind_DELTA;
    if (delta != (h.format_version == MANIFEST_FORMAT_VERSION_DELTA))
        return say(w, "manifest: version_kind is %s but format_version is %" PRIu32
                      ", expected %d",
                   delta ? "DELTA" : "FULL", h.format_version,
                   delta ? MANIFEST_FORMAT_VERSION_DELTA : MANIFEST_FORMAT_VERSION);
    if (delta && (h.parent_version == 0 || h.parent_version == h.version))
        return say(w, "manifest: a delta's parent_version is %" PRIu64
                      ", expected > 0 and not its own version %" PRIu64,
                   h.parent_version, h.version);
    if (h.producer.present) {
        if (h.producer.unterminated || h.producer.n > MANIFEST_PRODUCER_MAX - 1)
            return say(w, "manifest: producer %s is over the %d-byte limit", quote(h.producer).s,
                       MANIFEST_PRODUCER_MAX - 1);
        for (size_t c = 0; c < h.producer.n; c++) {
            unsigned char ch = (unsigned char)h.producer.p[c];
            if (ch < 0x20 || ch > 0x7e)
                return say(w,
                           "manifest: producer %s has byte 0x%02x at offset %zu; only printable "
                           "ASCII is allowed",
                           quote(h.producer).s, ch, c);
        }
    }
    if (!check_name("model_name", h.model_name, w))
        return false;
    if (str_eq(h.model_name, ".") || str_eq(h.model_name, ".."))
        return say(w, "manifest: model_name %s is not allowed (a path component)",
                   quote(h.model_name).s);
    if (h.model_kind > fbm::ModelKind_MAX)
        return say(w, "manifest: model_kind is %" PRIu64 ", expected 0..%d (LR, FM, FFM, DNN)",
                   h.model_kind, (int)fbm::ModelKind_MAX);
    if (h.version == 0)
        return say(w, "manifest: version is 0, expected > 0");
    if (h.version > (uint64_t)INT64_MAX || h.parent_version > (uint64_t)INT64_MAX)
        return say(w, "manifest: %s is %" PRIu64 ", expected at most 2^63-1 (the admin API's "
                      "JSON and the repository's marks carry a version as a signed 64-bit "
                      "integer)",
                   h.version > (uint64_t)INT64_MAX ? "version" : "parent_version",
                   h.version > (uint64_t)INT64_MAX ? h.version : h.parent_version);
    if (h.value_floats < 1 || h.value_floats > STORE_MAX_VALUE_FLOATS)
        return say(w, "manifest: value_floats is %" PRIu32 ", expected 1..%d", h.value_floats,
                   STORE_MAX_VALUE_FLOATS);
    if (h.value_type > fbm::ValueType_MAX)
        return say(w, "manifest: value_type is %" PRIu64 ", expected 0..%d (F32, F16)",
                   h.value_type, (int)fbm::ValueType_MAX);
    if (h.shard_count < 1 || h.shard_count > STORE_MAX_SHARDS ||
        (h.shard_count & (h.shard_count - 1)) != 0)
        return say(w, "manifest: shard_count is %" PRIu32 ", expected a power of two in 1..%d",
                   h.shard_count, STORE_MAX_SHARDS);
    if (!h.shards_present)
        return say(w, "manifest: shard_count is %" PRIu32 " but the shards list is missing",
                   h.shard_count);
    if (h.shards_len != h.shard_count)
        return say(w, "manifest: shard_count is %" PRIu32 " but the shards list has %zu entries",
                   h.shard_count, h.shards_len);

    const uint64_t rec =
        8 + (uint64_t)h.value_floats * (h.value_type == fbm::ValueType_F16 ? 2 : 4);
    for (uint32_t i = 0; i < h.shard_count; i++) {
        const Shard s = shard_at(i);
        char field[32];
        if (s.index != i)
            return say(w, "manifest: shards[%" PRIu32 "].index is %" PRIu32 ", expected %" PRIu32,
                       i, s.index, i);
        snprintf(field, sizeof field, "shards[%" PRIu32 "].file", i);
        if (!check_name(field, s.file, w))
            return false;
        if (s.file.p[0] == '.')
            return say(w, "manifest: %s %s starts with '.'", field, quote(s.file).s);
        if (str_eq(s.file, MANIFEST_FILE_NAME))
            return say(w, "manifest: %s is \"%s\", the manifest's own name", field,
                       MANIFEST_FILE_NAME);
        for (uint32_t j = 0; j < i; j++) {
            const Shard t = shard_at(j);
            if (t.file.n == s.file.n && memcmp(t.file.p, s.file.p, s.file.n) == 0)
                return say(w, "manifest: %s %s is also shards[%" PRIu32 "].file", field,
                           quote(s.file).s, j);
        }
        if (s.entries > (UINT64_MAX - SHARD_HEADER_BYTES) / rec)
            return say(w,
                       "manifest: shards[%" PRIu32 "].entries is %" PRIu64
                       ": %u + that many x %" PRIu64 " bytes overflows 64 bits",
                       i, s.entries, SHARD_HEADER_BYTES, rec);
        if (!delta && s.deletes != 0)
            return say(w, "manifest: shards[%" PRIu32 "].deletes is %" PRIu64
                          " in a full snapshot, expected 0",
                       i, s.deletes);
        const uint64_t up = SHARD_HEADER_BYTES + s.entries * rec;
        if (s.deletes > (UINT64_MAX - up) / 8)
            return say(w,
                       "manifest: shards[%" PRIu32 "].deletes is %" PRIu64
                       ": the file size overflows 64 bits",
                       i, s.deletes);
        const uint64_t want = up + s.deletes * 8;
        if (s.bytes != want && !delta)
            return say(w,
                       "manifest: shards[%" PRIu32 "].bytes is %" PRIu64 " but %u + %" PRIu64
                       " entries x %" PRIu64 " bytes = %" PRIu64,
                       i, s.bytes, SHARD_HEADER_BYTES, s.entries, rec, want);
        if (s.bytes != want)
            return say(w,
                       "manifest: shards[%" PRIu32 "].bytes is %" PRIu64 " but %u + %" PRIu64
                       " upserts x %" PRIu64 " bytes + %" PRIu64 " deletes x 8 = %" PRIu64,
                       i, s.bytes, SHARD_HEADER_BYTES, s.entries, rec, s.deletes, want);
    }
    return true;
}

/* Reads a C enum that may hold any bit pattern without loading it as the
 * enum type (an out-of-range enum load is undefined in C++). */
template <class E> uint64_t raw_enum(const E *e)
{
    std::underlying_type_t<E> v;
    memcpy(&v, e, sizeof v);
    return (uint64_t)v;
}

uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int encode(const manifest_t *m, uint8_t **buf, size_t *len, Why &w)
{
    const Head h = {
        m->format_version,
        str_of(m->meta.model_name),
        raw_enum(&m->meta.model_kind),
        m->meta.version,
        m->value_floats,
        raw_enum(&m->dtype),
        m->shard_count,
        m->shards != nullptr,
        m->shards ? m->shard_count : 0,
        raw_enum(&m->kind),
        m->meta.parent_version,
        str_of(m->producer),
    };
    auto shard_at = [m](uint32_t i) {
        const manifest_shard_t &s = m->shards[i];
        return Shard{s.index, str_of(s.file), s.entries, s.bytes, s.deletes};
    };
    if (!check_fields(h, shard_at, w))
        return -EINVAL;
    if (h.kind == fbm::VersionKind_DELTA && m->n_dense > 0)
        return fail(w, -EINVAL, "manifest: a delta has %" PRIu32 " dense_files, expected none",
                    m->n_dense);
    auto param_at = [m](size_t i) {
        return Param{str_of(m->params[i].key), str_of(m->params[i].value)};
    };
    auto dense_at = [m](size_t i) {
        const manifest_dense_t &d = m->dense[i];
        return Dense{str_of(d.name), str_of(d.file), d.bytes};
    };
    if (!check_extras(m->n_params, param_at, m->n_dense, dense_at, m->shard_count, shard_at, w))
        return -EINVAL;

    flatbuffers::FlatBufferBuilder fbb(1024);
    std::vector<flatbuffers::Offset<fbm::ShardFile>> shards;
    shards.reserve(m->shard_count);
    for (uint32_t i = 0; i < m->shard_count; i++) {
        const manifest_shard_t &s = m->shards[i];
        auto file = fbb.CreateString(s.file, strlen(s.file));
        shards.push_back(
            fbm::CreateShardFile(fbb, s.index, file, s.entries, s.bytes, s.xxh3, s.deletes));
    }
    auto shard_vec = fbb.CreateVector(shards);
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fbm::Param>>> param_vec = 0;
    if (m->n_params > 0) {
        std::vector<flatbuffers::Offset<fbm::Param>> params;
        for (uint32_t i = 0; i < m->n_params; i++) {
            auto key = fbb.CreateString(m->params[i].key);
            auto value = fbb.CreateString(m->params[i].value);
            params.push_back(fbm::CreateParam(fbb, key, value));
        }
        param_vec = fbb.CreateVector(params);
    }
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fbm::DenseFile>>> dense_vec = 0;
    if (m->n_dense > 0) {
        std::vector<flatbuffers::Offset<fbm::DenseFile>> dense;
        for (uint32_t i = 0; i < m->n_dense; i++) {
            const manifest_dense_t &d = m->dense[i];
            auto dname = fbb.CreateString(d.name);
            auto dfile = fbb.CreateString(d.file);
            dense.push_back(fbm::CreateDenseFile(fbb, dname, dfile, d.bytes, d.xxh3));
        }
        dense_vec = fbb.CreateVector(dense);
    }
    flatbuffers::Offset<flatbuffers::String> producer = 0;
    if (h.producer.n > 0)
        producer = fbb.CreateString(m->producer, h.producer.n);
    auto name = fbb.CreateString(m->meta.model_name, h.model_name.n);
    auto root = fbm::CreateManifest(fbb, m->format_version, name, (fbm::ModelKind)h.model_kind,
                                    m->meta.version, m->meta.parent_version, m->meta.created_unix,
                                    m->value_floats, (fbm::ValueType)h.value_type, m->shard_count,
                                    shard_vec, param_vec, dense_vec, m->hash_seed,
                                    (fbm::VersionKind)h.kind, producer);
    fbm::FinishManifestBuffer(fbb, root);

    const size_t n = fbb.GetSize();
    if (n + TRAILER_BYTES > MANIFEST_MAX_BYTES) /* cannot happen with <= 256 shards */
        return fail(w, -EINVAL, "manifest: encoded size %zu exceeds MANIFEST_MAX_BYTES", n);
    uint8_t *out = (uint8_t *)malloc(n + TRAILER_BYTES);
    if (!out)
        return fail(w, -ENOMEM, "manifest: out of memory for %zu bytes", n + TRAILER_BYTES);
    memcpy(out, fbb.GetBufferPointer(), n);
    store_le64(out + n, XXH3_64bits(out, n));
    *buf = out;
    *len = n + TRAILER_BYTES;
    return 0;
}

int decode(const uint8_t *buf, size_t len, manifest_t *out, Why &w)
{
    if (len < MIN_BYTES)
        return fail(w, -EBADMSG, "manifest: %zu bytes is too short, the minimum is %zu", len,
                    MIN_BYTES);
    if (len > MANIFEST_MAX_BYTES)
        return fail(w, -EBADMSG, "manifest: %zu bytes is over the %u-byte limit", len,
                    MANIFEST_MAX_BYTES);
    const size_t n = len - TRAILER_BYTES;
    const char *id = fbm::ManifestIdentifier();
    if (!flatbuffers::BufferHasIdentifier(buf, id)) {
        Str got{(const char *)buf + 4, 4, true, false};
        return fail(w, -EBADMSG,
                    "manifest: file identifier is %s, expected \"%s\" (not a manifest)",
                    quote(got).s, id);
    }
    const uint64_t stored = load_le64(buf + n);
    const uint64_t actual = XXH3_64bits(buf, n);
    if (stored != actual)
        return fail(w, -EBADMSG,
                    "manifest: checksum is 0x%016" PRIx64 " but the %zu bytes before it hash "
                    "to 0x%016" PRIx64 " (corrupt or truncated)",
                    stored, n, actual);

    /* FlatBuffers reads scalars in place: give it an 8-byte aligned copy. */
    uint8_t *copy = nullptr;
    const uint8_t *fb = buf;
    if ((uintptr_t)buf % 8 != 0) {
        copy = (uint8_t *)malloc(n);
        if (!copy)
            return fail(w, -ENOMEM, "manifest: out of memory for %zu bytes", n);
        memcpy(copy, buf, n);
        fb = copy;
    }
    struct FreeCopy {
        uint8_t *p;
        ~FreeCopy()
        {
            free(p);
        }
    } free_copy{copy};

    flatbuffers::Verifier::Options opts;
    opts.max_tables = MAX_TABLES;
    flatbuffers::Verifier v(fb, n, opts);
    if (!fbm::VerifyManifestBuffer(v))
        return fail(w, -EBADMSG,
                    "manifest: the %zu-byte FlatBuffer fails verification (an offset, length "
                    "or alignment is out of bounds)",
                    n);

    const fbm::Manifest *mf = fbm::GetManifest(fb);
    const auto *list = mf->shards();
    const Head h = {
        mf->format_version(), str_of(mf->model_name()), (uint64_t)mf->model_kind(),
        mf->version(),        mf->value_floats(),       (uint64_t)mf->value_type(),
        mf->shard_count(),    list != nullptr,          list ? (size_t)list->size() : 0,
        (uint64_t)mf->version_kind(), mf->parent_version(), str_of(mf->producer()),
    };
    auto shard_at = [list](uint32_t i) {
        const fbm::ShardFile *s = list->Get(i);
        return Shard{s->index(), str_of(s->file()), s->entries(), s->bytes(), s->deletes()};
    };
    if (!check_fields(h, shard_at, w))
        return -EBADMSG;
    if (h.kind == fbm::VersionKind_DELTA && mf->dense_files() && mf->dense_files()->size() > 0)
        return fail(w, -EBADMSG, "manifest: a delta has %" PRIu32 " dense_files, expected none",
                    (uint32_t)mf->dense_files()->size());
    const auto *plist = mf->params();
    const auto *dlist = mf->dense_files();
    const size_t n_params = plist ? plist->size() : 0, n_dense = dlist ? dlist->size() : 0;
    auto param_at = [plist](size_t i) {
        const fbm::Param *p = plist->Get((flatbuffers::uoffset_t)i);
        return Param{str_of(p->key()), str_of(p->value())};
    };
    auto dense_at = [dlist](size_t i) {
        const fbm::DenseFile *d = dlist->Get((flatbuffers::uoffset_t)i);
        return Dense{str_of(d->name()), str_of(d->file()), d->bytes()};
    };
    if (!check_extras(n_params, param_at, n_dense, dense_at, h.shard_count, shard_at, w))
        return -EBADMSG;

    manifest_shard_t *shards = (manifest_shard_t *)calloc(h.shard_count, sizeof *shards);
    if (!shards)
        return fail(w, -ENOMEM, "manifest: out of memory for %" PRIu32 " shards", h.shard_count);
    for (uint32_t i = 0; i < h.shard_count; i++) {
        const fbm::ShardFile *s = list->Get(i);
        shards[i].index = s->index();
        memcpy(shards[i].file, s->file()->data(), s->file()->size()); /* < 64: checked */
        shards[i].entries = s->entries();
        shards[i].bytes = s->bytes();
        shards[i].xxh3 = s->xxh3();
        shards[i].deletes = s->deletes();
    }
    out->format_version = h.format_version;
    memcpy(out->meta.model_name, h.model_name.p, h.model_name.n);
    out->meta.model_kind = (store_model_kind_t)h.model_kind;
    out->meta.version = h.version;
    out->meta.parent_version = mf->parent_version();
    out->meta.created_unix = mf->created_unix();
    out->hash_seed = mf->hash_seed();
    out->value_floats = h.value_floats;
    out->dtype = (store_dtype_t)h.value_type;
    out->shard_count = h.shard_count;
    out->shards = shards;
    out->kind = (manifest_kind_t)h.kind;
    memcpy(out->producer, h.producer.p, h.producer.n); /* < 64: checked */
    out->n_params = (uint32_t)n_params; /* lengths and sizes checked above */
    for (size_t i = 0; i < n_params; i++) {
        const fbm::Param *p = plist->Get((flatbuffers::uoffset_t)i);
        memcpy(out->params[i].key, p->key()->data(), p->key()->size());
        memcpy(out->params[i].value, p->value()->data(), p->value()->size());
    }
    out->n_dense = (uint32_t)n_dense;
    for (size_t i = 0; i < n_dense; i++) {
        const fbm::DenseFile *d = dlist->Get((flatbuffers::uoffset_t)i);
        memcpy(out->dense[i].name, d->name()->data(), d->name()->size());
        memcpy(out->dense[i].file, d->file()->data(), d->file()->size());
        out->dense[i].bytes = d->bytes();
        out->dense[i].xxh3 = d->xxh3();
    }
    return 0;
}

} // namespace

extern "C" int store__manifest_encode(const manifest_t *m, uint8_t **buf, size_t *len, char *why,
                               size_t why_len)
{
    Why w{why, why_len};
    if (why && why_len > 0)
        why[0] = '\0';
    if (!m || !buf || !len)
        return fail(w, -EINVAL, "manifest: encode needs a manifest and output pointers");
    *buf = nullptr;
    *len = 0;
    try {
        return encode(m, buf, len, w);
    } catch (const std::bad_alloc &) {
        return fail(w, -ENOMEM, "manifest: out of memory while encoding");
    } catch (...) {
        return fail(w, -ENOMEM, "manifest: unexpected C++ exception while encoding");
    }
}

extern "C" int store__manifest_decode(const uint8_t *buf, size_t len, manifest_t *out, char *why,
                               size_t why_len)
{
    Why w{why, why_len};
    if (why && why_len > 0)
        why[0] = '\0';
    if (!out)
        return fail(w, -EINVAL, "manifest: decode needs an output manifest");
    memset(out, 0, sizeof *out);
    if (!buf)
        len = 0;
    try {
        return decode(buf, len, out, w);
    } catch (const std::bad_alloc &) {
        return fail(w, -ENOMEM, "manifest: out of memory while decoding");
    } catch (...) {
        return fail(w, -EBADMSG, "manifest: unexpected C++ exception while decoding");
    }
}

extern "C" void store__manifest_free(manifest_t *m)
{
    if (!m)
        return;
    free(m->shards);
    m->shards = nullptr;
    m->shard_count = 0;
}
