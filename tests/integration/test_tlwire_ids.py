"""Unit tests of the Python client package tlserve (codec/python), whose codec is an
independent implementation of docs/wire.md: feature ids and hashing (XXH3 against reference
vectors, feature_id) and the ids model/reader.c gives libsvm, libffm and Criteo rows.

Run from the repo root (nothing needs installing; tlwire_testutil.py puts codec/python on
sys.path):
    python3 -m unittest discover -s tests/integration -p test_tlwire_ids.py

These tests need no server.  XXH3 reference values below were produced with libxxhash 0.8.1
(Debian 12 package libxxhash-dev 0.8.1-1) by a throwaway C program, not by this package:

    #include <xxhash.h>      /* gcc -O2 ref.c -lxxhash */
    buf[i] = (unsigned char)((i * 31 + 7) & 0xff);      for i in 0..8191
    printf("(%zu, 0x%016llx, 0x%016llx)", len, seed, XXH3_64bits_withSeed(buf, len, seed));
    /* ids: */
    h  = XXH3_64bits_withSeed(str, strlen(str), field);
    id = ((uint64_t)field << 56) | (h & ((1ULL << 56) - 1));

The lengths cover every XXH3 code path: 0, 1-3, 4-8, 9-16, 17-128 (each of its 4 branches),
129-240, and > 240 (one partial block, exactly one block of 1024 bytes, block boundaries
+-1, several blocks), with seeds 0, 1, 38, 255 and a full 64-bit seed.
"""

import unittest

from tlwire_testutil import w


def _xxh_buf(n):
    return bytes((i * 31 + 7) & 0xFF for i in range(n))


# (length of _xxh_buf prefix, seed, XXH3_64bits_withSeed)
XXH3_VECTORS = [
    (0, 0x0000000000000000, 0x2d06800538d394c2),
    (0, 0x0000000000000001, 0x4dc5b0cc826f6703),
    (0, 0x0000000000000026, 0x02da415f358de009),
    (0, 0x00000000000000ff, 0x1dca9a93ff400151),
    (0, 0x9e3779b97f4a7c15, 0x602b0e2cd6662c8b),
    (1, 0x0000000000000000, 0x4c5cca45d0f4811f),
    (1, 0x0000000000000001, 0x0a187bf012eca100),
    (1, 0x0000000000000026, 0xca5d7b9d1fddb61c),
    (1, 0x00000000000000ff, 0xf52fca73f0eafe89),
    (1, 0x9e3779b97f4a7c15, 0x2f3acd3805f81de3),
    (2, 0x0000000000000000, 0xa7e250c97710ff27),
    (2, 0x0000000000000001, 0x043df47a13488e85),
    (2, 0x0000000000000026, 0x6954787f4ed152a7),
    (2, 0x00000000000000ff, 0x148ab527de1ec191),
    (2, 0x9e3779b97f4a7c15, 0xae890deb5ef9a522),
    (3, 0x0000000000000000, 0x15f7093b173d005c),
    (3, 0x0000000000000001, 0x2d2f08ad1dcf5855),
    (3, 0x0000000000000026, 0x33c114eb7efd17b2),
    (3, 0x00000000000000ff, 0x9629e049f92a8eef),
    (3, 0x9e3779b97f4a7c15, 0x079dd5d54d89480a),
    (4, 0x0000000000000000, 0xdca012f95811b6b9),
    (4, 0x0000000000000001, 0x147ba1078a952951),
    (4, 0x0000000000000026, 0x3aee40b8ac7361e0),
    (4, 0x00000000000000ff, 0x50e2b6c054f2d227),
    (4, 0x9e3779b97f4a7c15, 0x1a246e2efb9c9b2e),
    (5, 0x0000000000000000, 0xb290cafc7b254345),
    (5, 0x0000000000000001, 0xe7d1024f783fd9c7),
    (5, 0x0000000000000026, 0xa591fa3e7bb6e52e),
    (5, 0x00000000000000ff, 0xcb5c3e9bd2809478),
    (5, 0x9e3779b97f4a7c15, 0xf35f0dfbb65fe08f),
    (7, 0x0000000000000000, 0x7561869c23da3c1b),
    (7, 0x0000000000000001, 0x936879a148433a5b),
    (7, 0x0000000000000026, 0x74b72fc18bc71d38),
    (7, 0x00000000000000ff, 0x934314fdc9fe8c28),
    (7, 0x9e3779b97f4a7c15, 0x09e5bec831fa48c0),
    (8, 0x0000000000000000, 0xdec6a9a43575982e),
    (8, 0x0000000000000001, 0x93db64e0c78addf0),
    (8, 0x0000000000000026, 0xa7fdb339b86ce790),
    (8, 0x00000000000000ff, 0xee72764003935ed8),
    (8, 0x9e3779b97f4a7c15, 0x19ef7d3919108aff),
    (9, 0x0000000000000000, 0xcbe393399f17ffbd),
    (9, 0x0000000000000001, 0x9b4ac94407ef94f7),
    (9, 0x0000000000000026, 0x99326f10c03e6127),
    (9, 0x00000000000000ff, 0x25da5942b65bea47),
    (9, 0x9e3779b97f4a7c15, 0x9c98d3e24dc54d34),
    (12, 0x0000000000000000, 0x46aaf92c7550afa4),
    (12, 0x0000000000000001, 0x943ee29b11f318ce),
    (12, 0x0000000000000026, 0xfd322510a5c7f409),
    (12, 0x00000000000000ff, 0x0feeee83dfb1c5a9),
    (12, 0x9e3779b97f4a7c15, 0xfe2aa65fa753fc49),
    (15, 0x0000000000000000, 0x545e19990471dc37),
    (15, 0x0000000000000001, 0x8a5a63b56a2b5c05),
    (15, 0x0000000000000026, 0x4f795f9ae26a32ed),
    (15, 0x00000000000000ff, 0x230a497da6ac0ee2),
    (15, 0x9e3779b97f4a7c15, 0x9a393060bce10286),
    (16, 0x0000000000000000, 0x7e484c18d74895d0),
    (16, 0x0000000000000001, 0x5eb10bd46ebeb101),
    (16, 0x0000000000000026, 0x4912bab7ebf1a072),
    (16, 0x00000000000000ff, 0x6e9fbe10d0fbd0e4),
    (16, 0x9e3779b97f4a7c15, 0xa106510078b0a252),
    (17, 0x0000000000000000, 0x208bde5ee2bed407),
    (17, 0x0000000000000001, 0x40ee90e37ff57a2c),
    (17, 0x0000000000000026, 0xff2c0e64b568ffa8),
    (17, 0x00000000000000ff, 0xea7fd597719a5533),
    (17, 0x9e3779b97f4a7c15, 0x0b2caf8bf9648eff),
    (31, 0x0000000000000000, 0xa937652b0119ca11),
    (31, 0x0000000000000001, 0x872cb66ea8834617),
    (31, 0x0000000000000026, 0x469952bc4815a533),
    (31, 0x00000000000000ff, 0x456dc3c11ea7a127),
    (31, 0x9e3779b97f4a7c15, 0xe425437c705fbca4),
    (32, 0x0000000000000000, 0x03df0ac5255d1446),
    (32, 0x0000000000000001, 0xb101853dfeaa2516),
    (32, 0x0000000000000026, 0xb588f631e07fe57e),
    (32, 0x00000000000000ff, 0x2c0007624b075e7d),
    (32, 0x9e3779b97f4a7c15, 0x3acbfdfb7e9f9668),
    (33, 0x0000000000000000, 0x199a362122d71f46),
    (33, 0x0000000000000001, 0x59e3ea853ec783eb),
    (33, 0x0000000000000026, 0x465fed881b3694d9),
    (33, 0x00000000000000ff, 0x4c806832d245810d),
    (33, 0x9e3779b97f4a7c15, 0x913b37d6b8df6d23),
    (48, 0x0000000000000000, 0x37fc8c692bc274e1),
    (48, 0x0000000000000001, 0xe99df214fe03ffda),
    (48, 0x0000000000000026, 0xb3f0d11a0c7a66c6),
    (48, 0x00000000000000ff, 0xfb6abdc27b31a6e8),
    (48, 0x9e3779b97f4a7c15, 0x0d075f19aec95ae5),
    (63, 0x0000000000000000, 0x76d4eec1f092847f),
    (63, 0x0000000000000001, 0x462e0519c1774bf3),
    (63, 0x0000000000000026, 0x019398943a079765),
    (63, 0x00000000000000ff, 0x31e93ede54a5ec66),
    (63, 0x9e3779b97f4a7c15, 0x46497a4a99ad609f),
    (64, 0x0000000000000000, 0xdd30702ab46b3745),
    (64, 0x0000000000000001, 0xa6c1a8df0ffff23b),
    (64, 0x0000000000000026, 0xe3383c607cc6d928),
    (64, 0x00000000000000ff, 0xe98164806c84aea1),
    (64, 0x9e3779b97f4a7c15, 0x4490c19c7048a1a1),
    (65, 0x0000000000000000, 0xfab36b851b94ce20),
    (65, 0x0000000000000001, 0xaaa8c39188e70f3a),
    (65, 0x0000000000000026, 0x89528b1f83b85c5a),
    (65, 0x00000000000000ff, 0xb453ade76324cc25),
    (65, 0x9e3779b97f4a7c15, 0xe6c2315ab5f5c409),
    (80, 0x0000000000000000, 0xbab4673ab248e1e2),
    (80, 0x0000000000000001, 0xc32b29b8d0c10dc9),
    (80, 0x0000000000000026, 0x9b910b2060db77fa),
    (80, 0x00000000000000ff, 0x34a22c8630f0bf9d),
    (80, 0x9e3779b97f4a7c15, 0x3199cb3f8b229597),
    (96, 0x0000000000000000, 0xd245cd2541582982),
    (96, 0x0000000000000001, 0x7b7dec87b161842b),
    (96, 0x0000000000000026, 0xfd166b7105e74a0f),
    (96, 0x00000000000000ff, 0xdffff75560de5c40),
    (96, 0x9e3779b97f4a7c15, 0xb0d250df3fab2308),
    (97, 0x0000000000000000, 0x60e3e1d0d43785b3),
    (97, 0x0000000000000001, 0x3ba4dc11decadb67),
    (97, 0x0000000000000026, 0x43bed5d0e4630169),
    (97, 0x00000000000000ff, 0x0ce353cb5401522b),
    (97, 0x9e3779b97f4a7c15, 0x9e127e846b5494c9),
    (127, 0x0000000000000000, 0xa915ed6396db8cc0),
    (127, 0x0000000000000001, 0x6a273c568a51af55),
    (127, 0x0000000000000026, 0xa9b67c5291e1ab47),
    (127, 0x00000000000000ff, 0x19da646f41818b01),
    (127, 0x9e3779b97f4a7c15, 0x30b3b03d7d3a07c1),
    (128, 0x0000000000000000, 0xf92b70eaa21a6288),
    (128, 0x0000000000000001, 0x6673c6814e935b97),
    (128, 0x0000000000000026, 0x0de7ce1ea8eb708a),
    (128, 0x00000000000000ff, 0x96e03b7a070c901a),
    (128, 0x9e3779b97f4a7c15, 0x95425530beb89fe8),
    (129, 0x0000000000000000, 0xf8f76713f2bb60fa),
    (129, 0x0000000000000001, 0x9638166292586e74),
    (129, 0x0000000000000026, 0x4af017b980d5ff44),
    (129, 0x00000000000000ff, 0x62dab7ad56af1cdb),
    (129, 0x9e3779b97f4a7c15, 0x29fa850b97ed9666),
    (130, 0x0000000000000000, 0x303a2c3823c3c34a),
    (130, 0x0000000000000001, 0xe42b3a24d1c1068c),
    (130, 0x0000000000000026, 0x1a3b0451b5425fdd),
    (130, 0x00000000000000ff, 0x509172f2ef82dbba),
    (130, 0x9e3779b97f4a7c15, 0x4d39c165e092a55e),
    (143, 0x0000000000000000, 0xc372f52c27156971),
    (143, 0x0000000000000001, 0x4acff864c994529a),
    (143, 0x0000000000000026, 0x2760bca0e144cb84),
    (143, 0x00000000000000ff, 0xb340ce4a970fa6e9),
    (143, 0x9e3779b97f4a7c15, 0xdf85e5c848ea1486),
    (144, 0x0000000000000000, 0xd87f00765ee3d89e),
    (144, 0x0000000000000001, 0x0234026a045d6f87),
    (144, 0x0000000000000026, 0x09353d6543c18817),
    (144, 0x00000000000000ff, 0x8397c1743afe2619),
    (144, 0x9e3779b97f4a7c15, 0x66714a2be4c5a8dd),
    (160, 0x0000000000000000, 0xc90911ffcef461e2),
    (160, 0x0000000000000001, 0x8f9fa718814009aa),
    (160, 0x0000000000000026, 0x02c05196dbb479fd),
    (160, 0x00000000000000ff, 0x835d03a7389db822),
    (160, 0x9e3779b97f4a7c15, 0xbe673734bbe06200),
    (239, 0x0000000000000000, 0xcaa9b7a588464745),
    (239, 0x0000000000000001, 0x0586c34256f0cf0c),
    (239, 0x0000000000000026, 0xeac831686867770c),
    (239, 0x00000000000000ff, 0xc7431d33c70c2b44),
    (239, 0x9e3779b97f4a7c15, 0x49a8e9695ef4ab09),
    (240, 0x0000000000000000, 0xccc7375172c41f03),
    (240, 0x0000000000000001, 0x8b1fdbbe81e5919e),
    (240, 0x0000000000000026, 0xdc78094239112cbe),
    (240, 0x00000000000000ff, 0xa9a7257fd5fdcc81),
    (240, 0x9e3779b97f4a7c15, 0x2d882e7899ff64cc),
    (241, 0x0000000000000000, 0x0b3b630948ce4a00),
    (241, 0x0000000000000001, 0x74435d0ed97c22f9),
    (241, 0x0000000000000026, 0x8cffe25c3b2526ae),
    (241, 0x00000000000000ff, 0xa6227d69f14f0f55),
    (241, 0x9e3779b97f4a7c15, 0x422e82e8913e49e0),
    (255, 0x0000000000000000, 0x89932170686cdd9a),
    (255, 0x0000000000000001, 0xd0a517bff9183f43),
    (255, 0x0000000000000026, 0x7fc1570dce5bcff4),
    (255, 0x00000000000000ff, 0xc7bc3b98a86b17ee),
    (255, 0x9e3779b97f4a7c15, 0x8f2f859ce5068ddf),
    (256, 0x0000000000000000, 0xec85b75bafe6ca74),
    (256, 0x0000000000000001, 0xf449472bc405d7d3),
    (256, 0x0000000000000026, 0xe797599c9f459894),
    (256, 0x00000000000000ff, 0x5df2d943c5efa0e9),
    (256, 0x9e3779b97f4a7c15, 0xb4dbe810e81c3d97),
    (300, 0x0000000000000000, 0xbaad8e6a5f186ce6),
    (300, 0x0000000000000001, 0x281e2ed0d610f86e),
    (300, 0x0000000000000026, 0x1e3c5dd2bfeb0111),
    (300, 0x00000000000000ff, 0xfd68195f39309139),
    (300, 0x9e3779b97f4a7c15, 0x67ec12d025965570),
    (1023, 0x0000000000000000, 0xf0d330ce2b3300fb),
    (1023, 0x0000000000000001, 0x135ff09a58fde173),
    (1023, 0x0000000000000026, 0x57cf384371d7eea1),
    (1023, 0x00000000000000ff, 0x79baae1e77f9d70a),
    (1023, 0x9e3779b97f4a7c15, 0x642b8b12a22cac34),
    (1024, 0x0000000000000000, 0x23bc880ebf0d29c6),
    (1024, 0x0000000000000001, 0xb5bf4ccc6942b02d),
    (1024, 0x0000000000000026, 0x3bfe2af0ea04a3e7),
    (1024, 0x00000000000000ff, 0x7cd2554172902373),
    (1024, 0x9e3779b97f4a7c15, 0x7e249adc60e1f9b4),
    (1025, 0x0000000000000000, 0xc09fdfbc398c7d82),
    (1025, 0x0000000000000001, 0xc92b70791f0e3d05),
    (1025, 0x0000000000000026, 0xdf71ba2103f63fed),
    (1025, 0x00000000000000ff, 0x07a0babfb6581d80),
    (1025, 0x9e3779b97f4a7c15, 0x16cfe055154ff1dd),
    (1087, 0x0000000000000000, 0x3ab6ed4b5be06fcc),
    (1087, 0x0000000000000001, 0x1a1bc001ffac671d),
    (1087, 0x0000000000000026, 0x7886b8f96492602e),
    (1087, 0x00000000000000ff, 0x3510b987d7413c92),
    (1087, 0x9e3779b97f4a7c15, 0xb8d704b0bba6ca49),
    (1088, 0x0000000000000000, 0xa16bad67843c5a45),
    (1088, 0x0000000000000001, 0xa0183adac4eb9260),
    (1088, 0x0000000000000026, 0xb440a43cc68b161b),
    (1088, 0x00000000000000ff, 0x7537d9c47fa2bdfa),
    (1088, 0x9e3779b97f4a7c15, 0x944ceebc0cd06093),
    (1089, 0x0000000000000000, 0x822327a86aad957c),
    (1089, 0x0000000000000001, 0x780c1c3eac315530),
    (1089, 0x0000000000000026, 0x60f09bf038d1d47b),
    (1089, 0x00000000000000ff, 0xe77e4e5d4bef3411),
    (1089, 0x9e3779b97f4a7c15, 0x9e748acac2f5e77c),
    (2048, 0x0000000000000000, 0x19f6f9c987331373),
    (2048, 0x0000000000000001, 0x2571c51149611399),
    (2048, 0x0000000000000026, 0xbc6686664c789cbf),
    (2048, 0x00000000000000ff, 0x3f6f8c8228cf01c0),
    (2048, 0x9e3779b97f4a7c15, 0x060600a6317839f9),
    (2049, 0x0000000000000000, 0x5045460f5d85c275),
    (2049, 0x0000000000000001, 0xf923d11b53efda34),
    (2049, 0x0000000000000026, 0x01e89570a45b91d5),
    (2049, 0x00000000000000ff, 0xc16109357a3ebfba),
    (2049, 0x9e3779b97f4a7c15, 0x502d2580f564ba88),
    (4096, 0x0000000000000000, 0xa3c19f8174cde0bb),
    (4096, 0x0000000000000001, 0x7d3a575d89e285a7),
    (4096, 0x0000000000000026, 0x7e5e2b1c94c738b8),
    (4096, 0x00000000000000ff, 0x48a899b37fb25ba6),
    (4096, 0x9e3779b97f4a7c15, 0x224e1aff9c0f0707),
    (5000, 0x0000000000000000, 0x559fff92c2b7f8ee),
    (5000, 0x0000000000000001, 0xaa85311c0f15a081),
    (5000, 0x0000000000000026, 0x99c4f8617fe4f7a2),
    (5000, 0x00000000000000ff, 0x64459583a265bc13),
    (5000, 0x9e3779b97f4a7c15, 0xd5959148128ebcab),
]

# (field, raw UTF-8, feature id) per docs/wire.md "Feature ids and hashing"
FEATURE_ID_VECTORS = [
    (0, "", 0x0006800538d394c2),
    (1, "", 0x01c5b0cc826f6703),
    (13, "", 0x0dcd913e8ed4dad8),
    (38, "", 0x26da415f358de009),
    (255, "", 0xffca9a93ff400151),
    (0, "a", 0x00c632b61e964e1f),
    (1, "a", 0x01f6d0996f37a720),
    (13, "a", 0x0d650164561dbfa9),
    (38, "a", 0x26f8f622cf2c769d),
    (255, "a", 0xff3451005b75c214),
    (0, "1", 0x00cd25028f98f158),
    (1, "1", 0x013b92f140bc40a5),
    (13, "1", 0x0d41cfdbd6aeddf3),
    (38, "1", 0x2684b0f93d4ba0e2),
    (255, "1", 0xff628cd01860e0fb),
    (0, "68fd1e64", 0x00b0431058060b4d),
    (1, "68fd1e64", 0x0105b9eaec3433a1),
    (13, "68fd1e64", 0x0dd51d9c5a0b5ded),
    (38, "68fd1e64", 0x26dea443e9af3705),
    (255, "68fd1e64", 0xfffd18eb9ed26875),
    (0, "80e26c9b", 0x00067ed1b5a572e1),
    (1, "80e26c9b", 0x013ccc3a920e66d8),
    (13, "80e26c9b", 0x0d2410dc1be690d7),
    (38, "80e26c9b", 0x26c56a80dffa1040),
    (255, "80e26c9b", 0xffde1633088578d5),
    (0, "fb936136", 0x002d954accd0c321),
    (1, "fb936136", 0x01f657c599ad1448),
    (13, "fb936136", 0x0d1d4a5b4fce8e54),
    (38, "fb936136", 0x26d2e7f3d1bff44e),
    (255, "fb936136", 0xffd7a2be8dd4c6c6),
    (0, "05db9164", 0x00e8c6a4234d4bd0),
    (1, "05db9164", 0x0182a025fe36d49b),
    (13, "05db9164", 0x0dde7d6c7eca8566),
    (38, "05db9164", 0x26bc1bb9264bbdb6),
    (255, "05db9164", 0xff18f0f99082d0a9),
    (0, "hello world", 0x0047b1ea40e6988b),
    (1, "hello world", 0x01aeb52a10fdaf2d),
    (13, "hello world", 0x0d601fa7dcd67f61),
    (38, "hello world", 0x2605f04787acc35e),
    (255, "hello world", 0xff3a15544eaf12f0),
    (0, "0", 0x0082e3a7bb241055),
    (1, "0", 0x017b6de7be6a8063),
    (13, "0", 0x0d32467036f6d8d7),
    (38, "0", 0x26126288b15094c1),
    (255, "0", 0xffc953cc63c4296d),
    (0, "-1", 0x0025a7b612cba21f),
    (1, "-1", 0x01958968e6ee2708),
    (13, "-1", 0x0db56b67f47ca472),
    (38, "-1", 0x262ab84be6fa8c6c),
    (255, "-1", 0xff40de7d60629327),
    (0, "1000000", 0x00c591e1d9a50461),
    (1, "1000000", 0x01404b560c593d16),
    (13, "1000000", 0x0dc91540043ec46f),
    (38, "1000000", 0x26ec52308dd928f6),
    (255, "1000000", 0xff69fbe4758a643d),
    (0, "a9b0ba1e7c2c5e2f", 0x00b5eec46445f2eb),
    (1, "a9b0ba1e7c2c5e2f", 0x01a17f6975b59f7e),
    (13, "a9b0ba1e7c2c5e2f", 0x0d1c33377d1ff200),
    (38, "a9b0ba1e7c2c5e2f", 0x26026c7fcaeb7312),
    (255, "a9b0ba1e7c2c5e2f", 0xffa8d653c68dc0e3),
    (0, "the quick brown fox jumps over the lazy dog", 0x00541a9cacf545aa),
    (1, "the quick brown fox jumps over the lazy dog", 0x014714c8bf416cd9),
    (13, "the quick brown fox jumps over the lazy dog", 0x0db348add32c7c6b),
    (38, "the quick brown fox jumps over the lazy dog", 0x267a59071a888f3a),
    (255, "the quick brown fox jumps over the lazy dog", 0xff17aa445deea7fa),
]


# ---------------------------------------------------------------------------------------------
class TestXXH3(unittest.TestCase):
    def test_reference_vectors(self):
        buf = _xxh_buf(max(n for n, _, _ in XXH3_VECTORS))
        lengths = set()
        for n, seed, expect in XXH3_VECTORS:
            lengths.add(n)
            with self.subTest(len=n, seed=hex(seed)):
                self.assertEqual(w.xxh3_64(buf[:n], seed), expect)
        # every length class is covered
        for lo, hi in ((0, 0), (1, 3), (4, 8), (9, 16), (17, 32), (33, 64), (65, 96), (97, 128),
                       (129, 240), (241, 1024), (1025, 10**9)):
            self.assertTrue(any(lo <= n <= hi for n in lengths), (lo, hi))

    def test_known_public_values(self):
        # XXH3_64bits of "" with seed 0 (published in xxHash's own sanity tests)
        self.assertEqual(w.xxh3_64(b""), 0x2D06800538D394C2)

    def test_input_types(self):
        self.assertEqual(w.xxh3_64(bytearray(b"abcdefgh"), 3), w.xxh3_64(b"abcdefgh", 3))
        self.assertEqual(w.xxh3_64(memoryview(b"abcdefgh"), 3), w.xxh3_64(b"abcdefgh", 3))

    def test_feature_id_vectors(self):
        for field, raw, expect in FEATURE_ID_VECTORS:
            with self.subTest(field=field, raw=raw):
                fid = w.feature_id(field, raw)
                self.assertEqual(fid, expect)
                self.assertEqual(fid >> 56, field)
                self.assertEqual(w.feature_id(field, raw.encode()), expect)

    def test_feature_id_field_range(self):
        self.assertRaises(ValueError, w.feature_id, 256, "x")
        self.assertRaises(ValueError, w.feature_id, -1, "x")


class TestReaderIds(unittest.TestCase):
    """The ids model/reader.c gives libsvm, libffm and Criteo rows."""

    def test_libffm_libsvm(self):
        self.assertEqual(w.libffm_id(0, 0), 1)
        self.assertEqual(w.libffm_id(3, 41), (3 << 56) | 42)
        self.assertEqual(w.libffm_id(255, 2**56 - 2), w.U64_MASK)
        self.assertEqual(w.libsvm_id(9), 10)
        for bad in ((256, 0), (-1, 0), (0, -1), (0, 2**56 - 1)):
            self.assertRaises(ValueError, w.libffm_id, *bad)

    def test_criteo(self):
        # floor(ln(v)^2) above 2, v itself otherwise
        self.assertEqual([w.criteo_int(v) for v in (-3, 0, 1, 2, 3, 5, 100, 10**6)],
                         [-3, 0, 1, 2, 1, 2, 21, 190])
        row = ["5", "", "-1"] + [""] * 10 + ["68fd1e64"] + [None] * 24 + ["e5ba7672"]
        self.assertEqual(w.criteo_ids(row), [w.feature_id(0, "2"), w.feature_id(2, "-1"),
                                             w.feature_id(13, "68fd1e64"),
                                             w.feature_id(38, "e5ba7672")])
        self.assertEqual(w.criteo_ids(row)[3], 0x264E695B1E4D6D29)   # docs/wire.md's vector
        self.assertRaises(ValueError, w.criteo_ids, row[:38])
        self.assertRaises(ValueError, w.criteo_ids, ["x"] + row[1:])


if __name__ == "__main__":
    unittest.main()
