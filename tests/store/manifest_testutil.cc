/*
 * manifest_testutil.cc — test-only MANIFEST writer without field checks (see
 * manifest_testutil.h).  Uses the same flatc-generated header as
 * store/manifest.cc, so the bytes differ from a real manifest only in the
 * fields the test chose to break.
 *
 * THREAD SAFETY: no global state.
 */
#include "manifest_testutil.h"

#include "manifest_generated.h"

#include <errno.h>
#include <new>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

namespace fbm = tl::manifest;

static flatbuffers::Offset<flatbuffers::String> make_str(flatbuffers::FlatBufferBuilder &fbb,
                                                         const char *s, size_t n)
{
    if (!s)
        return 0;
    return fbb.CreateString(s, n ? n : strlen(s));
}

extern "C" void manifest_fix_trailer(uint8_t *buf, size_t len)
{
    if (len < 8)
        return;
    uint64_t h = XXH3_64bits(buf, len - 8);
    for (int i = 0; i < 8; i++)
        buf[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

extern "C" int manifest_encode_unchecked(const manifest_raw_t *r, uint8_t **buf, size_t *len)
{
    try {
        flatbuffers::FlatBufferBuilder fbb(1024);
        flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fbm::ShardFile>>> list = 0;
        if (r->shards) {
            std::vector<flatbuffers::Offset<fbm::ShardFile>> v;
            for (size_t i = 0; i < r->n_shards; i++) {
                const manifest_raw_shard_t &s = r->shards[i];
                auto file = make_str(fbb, s.file, s.file_len);
                v.push_back(fbm::CreateShardFile(fbb, s.index, file, s.entries, s.bytes, s.xxh3));
            }
            list = fbb.CreateVector(v);
        }
        flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fbm::Param>>> params = 0;
        flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fbm::DenseFile>>> dense = 0;
        if (r->with_extras) {
            std::vector<flatbuffers::Offset<fbm::Param>> p;
            p.push_back(fbm::CreateParamDirect(fbb, "learning_rate", "0.05"));
            p.push_back(fbm::CreateParamDirect(fbb, "l2", "1e-6"));
            params = fbb.CreateVector(p);
            std::vector<flatbuffers::Offset<fbm::DenseFile>> d;
            d.push_back(fbm::CreateDenseFileDirect(fbb, "mlp.0.weight", "dense-0.bin", 4096, 42));
            dense = fbb.CreateVector(d);
        }
        auto name = make_str(fbb, r->model_name, r->model_name_len);
        auto root =
            fbm::CreateManifest(fbb, r->format_version, name, (fbm::ModelKind)r->model_kind,
                                r->version, r->parent_version, r->created_unix, r->value_floats,
                                (fbm::ValueType)r->value_type, r->shard_count, list, params, dense);
        fbm::FinishManifestBuffer(fbb, root);
        size_t n = fbb.GetSize();
        uint8_t *out = (uint8_t *)malloc(n + 8);
        if (!out)
            return -ENOMEM;
        memcpy(out, fbb.GetBufferPointer(), n);
        manifest_fix_trailer(out, n + 8);
        *buf = out;
        *len = n + 8;
        return 0;
    } catch (...) {
        return -ENOMEM;
    }
}
