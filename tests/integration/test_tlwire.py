"""Unit tests for the Python client package tlserve (codec/python), whose codec is an
independent implementation of docs/wire.md, and its Client against a loopback fake server.

Run from the repo root (the test puts codec/python on sys.path; nothing needs installing):
    python3 -m unittest discover -s tests/integration -p test_tlwire.py

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

import math
import os
import random
import socket
import struct
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "codec", "python"))
import tlserve as w  # noqa: E402
from tlserve import ErrorCode as E  # noqa: E402


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


class WireErrorMixin:
    def assertWireError(self, code, fn, *args, **kwargs):
        with self.assertRaises(w.WireError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code, code,
                         "expected %s, got %s" % (w.error_name(code), cm.exception))
        return cm.exception


# ---------------------------------------------------------------------------------------------
class TestVarint(WireErrorMixin, unittest.TestCase):
    CASES = [
        (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
        (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
        (2**56 - 1, b"\xff" * 7 + b"\x7f"), (2**56, b"\x80" * 8 + b"\x01"),
        (2**63 - 1, b"\xff" * 8 + b"\x7f"), (2**63, b"\x80" * 9 + b"\x01"),
        (2**64 - 1, b"\xff" * 9 + b"\x01"),
    ]

    def test_known_encodings(self):
        for v, enc in self.CASES:
            with self.subTest(v=v):
                self.assertEqual(w.encode_varint(v), enc)
                self.assertEqual(w.decode_varint(enc), (v, len(enc)))

    def test_lengths(self):
        for k in range(1, 11):
            self.assertEqual(len(w.encode_varint(2 ** (7 * (k - 1)))), k)
            self.assertEqual(len(w.encode_varint(2 ** (7 * k) - 1 if k < 10 else 2**64 - 1)), k)

    def test_random_round_trip(self):
        rng = random.Random(7)
        for _ in range(2000):
            v = rng.getrandbits(rng.randrange(1, 65))
            enc = w.encode_varint(v)
            self.assertEqual(w.decode_varint(b"\x55" + enc + b"\x99", 1), (v, 1 + len(enc)))

    def test_encode_range(self):
        self.assertRaises(ValueError, w.encode_varint, -1)
        self.assertRaises(ValueError, w.encode_varint, 2**64)

    def test_non_minimal_accepted(self):
        self.assertEqual(w.decode_varint(b"\x80\x00"), (0, 2))
        self.assertEqual(w.decode_varint(b"\x81\x80\x00"), (1, 3))
        self.assertEqual(w.decode_varint(b"\x80" * 9 + b"\x00"), (0, 10))
        self.assertEqual(w.decode_varint(b"\xff" * 9 + b"\x00"), (2**63 - 1, 10))

    def test_tenth_byte_overflow(self):
        for last in (0x02, 0x03, 0x40, 0x7F):
            with self.subTest(last=last):
                self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\xff" * 9 + bytes([last]))
                self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 9 + bytes([last]))

    def test_longer_than_ten_bytes(self):
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 10 + b"\x00")
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\xff" * 9 + b"\x81\x00")
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 20)

    def test_runs_past_end(self):
        # docs/wire.md Conventions: a varint cut off by the end of the payload is TRUNCATED
        self.assertEqual(w.VARINT_TRUNCATED_ERROR, E.TRUNCATED)
        code = E.TRUNCATED
        self.assertWireError(code, w.decode_varint, b"")
        self.assertWireError(code, w.decode_varint, b"\x80")
        self.assertWireError(code, w.decode_varint, b"\xff" * 9)
        # the end bound is honoured even if the buffer goes on
        self.assertWireError(code, w.decode_varint, b"\x80\x80\x01", 0, 2)
        self.assertEqual(w.decode_varint(b"\x80\x80\x01", 0, 3), (16384, 3))
        self.assertWireError(code, w.decode_varint, b"\x01", 1)
        # ... but ten bytes are enough to tell an over-long or overflowing varint, whatever
        # follows: BAD_VARINT, not TRUNCATED
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\x80" * 10)
        self.assertWireError(E.BAD_VARINT, w.decode_varint, b"\xff" * 9 + b"\x02")


# ---------------------------------------------------------------------------------------------
class TestFrameHeader(WireErrorMixin, unittest.TestCase):
    def test_layout(self):
        h = w.pack_header(w.MsgType.PREDICT, 0x0102030405060708, 0x11)
        self.assertEqual(h, b"TLW1" + b"\x01\x01" + b"\x00\x00"
                         + bytes.fromhex("0807060504030201") + b"\x11\x00\x00\x00"
                         + b"\x00\x00\x00\x00")
        h = w.pack_header(w.MsgType.LOOKUP, 0, 0, flags=1)
        self.assertEqual(h[4:8], b"\x01\x05\x01\x00")
        self.assertEqual(len(h), w.HEADER_SIZE)

    def test_round_trip(self):
        for t in w.MsgType:
            for rid in (0, 1, 2**32, 2**64 - 1):
                for plen in (0, 1, 65535, w.MAX_PAYLOAD):
                    flags = w.DEFINED_FLAGS[t]
                    h = w.parse_header(w.pack_header(t, rid, plen, flags) + b"extra")
                    self.assertEqual(h, w.FrameHeader(t, flags, rid, plen))

    def test_unknown_type_is_not_a_header_error(self):
        for t in (0, 12, 255):
            self.assertEqual(w.parse_header(w.pack_header(t, 5, 3, flags=0xFFFF)).type, t)

    def test_short(self):
        self.assertWireError(E.TRUNCATED, w.parse_header, w.pack_header(1, 1, 0)[:23])
        self.assertWireError(E.TRUNCATED, w.parse_header, b"")

    def test_bad_magic(self):
        for m in (b"TLW0", b"TLW2", b"tlw1", b"\x00\x00\x00\x00", b"1WLT"):
            self.assertWireError(E.BAD_MAGIC, w.parse_header, w.pack_header(1, 1, 0, magic=m))

    def test_bad_version(self):
        for v in (0, 2, 255):
            self.assertWireError(E.BAD_VERSION, w.parse_header,
                                 w.pack_header(1, 1, 0, version=v))

    def test_too_large(self):
        self.assertWireError(E.FRAME_TOO_LARGE, w.parse_header,
                             w.pack_header(1, 1, w.MAX_PAYLOAD + 1))
        self.assertWireError(E.FRAME_TOO_LARGE, w.parse_header, w.pack_header(1, 1, 2**32 - 1))

    def test_reserved(self):
        for r in (1, 0x100, 0x10000, 0x80000000):
            self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(1, 1, 0, reserved=r))

    def test_undefined_flags(self):
        for t in (w.MsgType.PREDICT_RESULT, w.MsgType.TRAIN_ACK, w.MsgType.ERROR,
                  w.MsgType.PING, w.MsgType.PONG, w.MsgType.LOOKUP_RESULT, w.MsgType.FEEDBACK,
                  w.MsgType.FEEDBACK_ACK):
            for f in (1, 2, 0x8000):
                self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(t, 1, 0, f))
        # bit 0 is PREDICT's LOG and TRAIN's WEIGHTS; the other bits are undefined
        for t in (w.MsgType.PREDICT, w.MsgType.TRAIN):
            for f in (2, 0x8000, 3):
                self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(t, 1, 0, f))
            self.assertEqual(w.parse_header(w.pack_header(t, 1, 0, 1)).flags, 1)
        # types above 11 are unknown: their flags are not checked
        self.assertEqual(w.parse_header(w.pack_header(12, 1, 0, 0xffff)).flags, 0xffff)
        self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(w.MsgType.LOOKUP, 1, 0, 2))
        w.parse_header(w.pack_header(w.MsgType.LOOKUP, 1, 0, 1))

    def test_check_order(self):
        # docs/wire.md "Frame": magic, version, payload_len, reserved, flags; first bad one wins
        kw = dict(magic=b"XXXX", version=9, reserved=1)
        bad = w.pack_header(1, 1, w.MAX_PAYLOAD + 1, 2, **kw)
        self.assertWireError(E.BAD_MAGIC, w.parse_header, bad)
        kw.pop("magic")
        self.assertWireError(E.BAD_VERSION, w.parse_header,
                             w.pack_header(1, 1, w.MAX_PAYLOAD + 1, 2, **kw))
        kw.pop("version")
        self.assertWireError(E.FRAME_TOO_LARGE, w.parse_header,
                             w.pack_header(1, 1, w.MAX_PAYLOAD + 1, 2, **kw))
        self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(1, 1, 0, 2, **kw))
        self.assertWireError(E.BAD_HEADER, w.parse_header, w.pack_header(1, 1, 0, 2))

    def test_frame(self):
        f = w.encode_frame(w.MsgType.PING, 42, b"abc")
        self.assertEqual(w.decode_frame(f), w.Frame(w.MsgType.PING, 0, 42, b"abc"))
        self.assertWireError(E.TRUNCATED, w.decode_frame, f[:-1])
        self.assertWireError(E.TRAILING_BYTES, w.decode_frame, f + b"\x00")


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


# ---------------------------------------------------------------------------------------------
def standard_request(rng, values=False):
    """docs/wire.md "The standard request": 200 items, 300 shared + 200 per-item features."""
    def block(n):
        ids = set()
        while len(ids) < n:
            ids.add(w.feature_id(rng.randrange(39), "%08x" % rng.getrandbits(32)))
        ids = sorted(ids)
        if not values:
            return w.Block(ids, None)
        return w.Block(ids, [struct.unpack("<f", struct.pack("<f", rng.uniform(-10, 10)))[0]
                             for _ in ids])
    return block(300), [block(200) for _ in range(200)]


class TestBlock(WireErrorMixin, unittest.TestCase):
    def dec(self, payload):
        blk, pos = w.decode_block(payload)
        self.assertEqual(pos, len(payload))
        return blk

    def test_golden(self):
        self.assertEqual(bytes(w.encode_block([300, 1])), b"\x02\x00\x01\xab\x02")
        self.assertEqual(bytes(w.encode_block(([5], [0.5]))), b"\x01\x01\x05\x00\x00\x00\x3f")
        self.assertEqual(bytes(w.encode_block([])), b"\x00\x00")
        self.assertEqual(self.dec(b"\x02\x00\x01\xab\x02"), w.Block([1, 300], None))
        self.assertEqual(self.dec(b"\x00\x00"), w.Block([], None))

    def test_first_id_zero_and_max(self):
        blk = w.Block([0, 1, 2**64 - 1], [1.0, -2.5, 0.0])
        self.assertEqual(self.dec(bytes(w.encode_block(blk))), blk)

    def test_make_block_sorts_with_values(self):
        blk = w.make_block([30, 10, 20], [3.0, 1.0, 2.0])
        self.assertEqual(blk, w.Block([10, 20, 30], [1.0, 2.0, 3.0]))
        self.assertWireError(E.UNSORTED_FEATURES, w.make_block, [1, 2, 1])

    def test_encoder_rejects_bad_blocks(self):
        self.assertWireError(E.UNSORTED_FEATURES, w.encode_block, w.Block([2, 1]))
        self.assertWireError(E.UNSORTED_FEATURES, w.encode_block, w.Block([2, 2]))
        self.assertWireError(E.BAD_VALUE, w.encode_block, w.Block([1], [math.nan]))
        self.assertWireError(E.TOO_MANY_FEATURES, w.encode_block,
                             w.Block(list(range(w.MAX_BLOCK_FEATURES + 1))))

    def test_zero_delta(self):
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, b"\x02\x00\x05\x00")
        self.assertWireError(E.UNSORTED_FEATURES, self.dec,
                             bytes(w.encode_block(w.Block([7, 7]), check=False)))

    def test_sum_overflow(self):
        p = b"\x02\x00" + w.encode_varint(2**64 - 1) + b"\x01"
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, p)
        p = b"\x02\x00" + w.encode_varint(2**63) + w.encode_varint(2**63)
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, p)

    def test_bad_values(self):
        for v in (math.nan, math.inf, -math.inf):
            p = b"\x01\x01\x01" + struct.pack("<f", v)
            self.assertWireError(E.BAD_VALUE, self.dec, p)
        # a signalling NaN bit pattern
        self.assertWireError(E.BAD_VALUE, self.dec, b"\x01\x01\x01" + b"\x01\x00\x80\x7f")

    def test_block_limit(self):
        n = w.MAX_BLOCK_FEATURES
        ok = w.encode_varint(n) + b"\x00\x00" + b"\x01" * (n - 1)
        self.assertEqual(len(self.dec(ok).ids), n)
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(n + 1) + b"\x00\x00" + b"\x01" * n)
        # the count alone is enough: reject before reading the deltas
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec, w.encode_varint(2**40))

    def test_undefined_block_flags(self):
        self.assertEqual(w.BLOCK_FLAGS_ERROR, E.BAD_VALUE)
        for f in (0x04, 0x80, 0xFF):
            self.assertWireError(E.BAD_VALUE, self.dec, b"\x01" + bytes([f]) + b"\x01")
            # block_flags is checked before the size check and before the deltas
            self.assertWireError(E.BAD_VALUE, self.dec, b"\x05" + bytes([f]))
            self.assertWireError(E.BAD_VALUE, self.dec, b"\x02" + bytes([f]) + b"\x05\x00")

    def test_fixed_ids(self):
        """Block flag bit 1: ids as little-endian u64s, chosen by the encoder for ids spread
        over the 64-bit space; order checked, size checked first (8 bytes an id)."""
        ids = sorted({(i * 0x9E3779B97F4A7C15) & w.U64_MASK for i in range(1, 200)})
        enc = bytes(w.encode_block(ids))
        self.assertEqual(enc[2], w.BLOCK_FLAG_FIXED)          # n=199 takes 2 varint bytes
        self.assertEqual(len(enc), 3 + 8 * len(ids))
        self.assertEqual(w.decode_block(enc)[0].ids, ids)
        small = list(range(10, 500, 7))                       # dense ids stay delta varints
        self.assertEqual(w.encode_block(small)[1], 0)
        self.assertEqual(w.decode_block(bytes(w.encode_block(small, fixed_ids=True)))[0].ids,
                         small)
        dup = bytearray(enc)
        dup[3 + 8 * 5:3 + 8 * 6] = dup[3 + 8 * 4:3 + 8 * 5]   # id 5 repeats id 4
        self.assertWireError(E.UNSORTED_FEATURES, w.decode_block, bytes(dup))
        self.assertWireError(E.TRUNCATED, w.decode_block, enc[:-1])
        # the size check counts 8 bytes an id before reading any
        self.assertWireError(E.TRUNCATED, w.decode_block, b"\x03\x02" + b"\x00" * 23)

    def test_truncation(self):
        full = bytes(w.encode_block(([1, 2**40], [0.25, 4.0])))
        for cut in range(len(full)):
            with self.subTest(cut=cut):
                self.assertWireError(E.TRUNCATED, w.decode_block, full[:cut])
        self.assertWireError(E.TRUNCATED, w.decode_block, full[:-1])   # in the values
        self.assertWireError(E.TRUNCATED, w.decode_block, full[:1])    # block_flags
        self.assertWireError(E.TRUNCATED, w.decode_block, full[:0])    # the count varint
        self.assertWireError(E.TRUNCATED, w.decode_block, b"\x80")     # inside the count

    def test_values_run_past_end_after_long_deltas(self):
        # n * 5 bytes are left, so the size check passes, but the deltas take more than one
        # byte each and the values run past the payload: TRUNCATED when they are read
        p = b"\x02\x01" + w.encode_varint(2**40) + b"\x01" + b"\x00" * 3
        self.assertEqual(len(p) - 2, 2 * 5)
        self.assertWireError(E.TRUNCATED, self.dec, p)

    def test_size_checked_before_deltas(self):
        # docs/wire.md "Decoding order": fewer than n bytes left (n * 5 with values) is
        # TRUNCATED before any delta is read, even when the deltas that are there are bad
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, b"\x02\x00\x05\x00")
        self.assertWireError(E.TRUNCATED, self.dec, b"\x03\x00\x05\x00")
        dup_with_values = b"\x02\x01\x05\x00" + struct.pack("<2f", 1.0, 2.0)
        self.assertWireError(E.UNSORTED_FEATURES, self.dec, dup_with_values)   # 10 = 2 * 5
        self.assertWireError(E.TRUNCATED, self.dec, dup_with_values[:-1])      # 9 < 10
        # a bad varint among too few bytes: TRUNCATED, the deltas are never read
        self.assertWireError(E.BAD_VARINT, w.decode_block,
                             b"\x0b\x00" + b"\xff" * 9 + b"\x02\x01")
        self.assertWireError(E.TRUNCATED, w.decode_block, b"\x0c\x00" + b"\xff" * 9 + b"\x02\x01")
        # the largest count the limits allow, with nothing after it
        self.assertWireError(E.TRUNCATED, self.dec, w.encode_varint(w.MAX_BLOCK_FEATURES) + b"\x00")
        self.assertWireError(E.TRUNCATED, self.dec, w.encode_varint(w.MAX_BLOCK_FEATURES) + b"\x01"
                             + b"\x01" * w.MAX_BLOCK_FEATURES)
        # n = 0 needs nothing more, with or without values
        self.assertEqual(self.dec(b"\x00\x01"), w.Block([], []))

    def test_limits_checked_before_size(self):
        # the count's limits come before its size check: TOO_MANY_FEATURES, not TRUNCATED
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(w.MAX_BLOCK_FEATURES + 1) + b"\x00")
        # and before block_flags is read (or found missing)
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(w.MAX_BLOCK_FEATURES + 1) + b"\x02")
        self.assertWireError(E.TOO_MANY_FEATURES, self.dec,
                             w.encode_varint(w.MAX_BLOCK_FEATURES + 1))


# ---------------------------------------------------------------------------------------------
class TestPredict(WireErrorMixin, unittest.TestCase):
    def test_golden(self):
        p = w.encode_predict("m", [300, 1], [([5], [0.5])], version=7)
        expect = (b"\x01m" + b"\x07" + b"\x00" * 7 + b"\x01"
                  + b"\x02\x00\x01\xab\x02" + b"\x01\x01\x05\x00\x00\x00\x3f")
        self.assertEqual(p, expect)
        r = w.decode_predict(expect)
        self.assertEqual(r, w.PredictRequest("m", 7, w.Block([1, 300]), [w.Block([5], [0.5])]))

    def test_standard_request_binary(self):
        rng = random.Random(1)
        shared, items = standard_request(rng)
        p = w.encode_predict("ctr.criteo-v1_x", shared, items, version=2**64 - 1)
        n_ids = len(shared.ids) + sum(len(b.ids) for b in items)
        self.assertEqual(n_ids, 40300)
        # every id costs 7..9 varint bytes; framing overhead is small
        self.assertGreater(len(p), 7 * n_ids)
        self.assertLess(len(p), 9 * n_ids + 1000)
        r = w.decode_predict(p)
        self.assertEqual(r.model, "ctr.criteo-v1_x")
        self.assertEqual(r.version, 2**64 - 1)
        self.assertEqual(r.shared, shared)
        self.assertEqual(r.items, items)
        self.assertTrue(all(b.values is None for b in r.items))
        frame = w.encode_frame(w.MsgType.PREDICT, 99, p)
        f = w.decode_frame(frame)
        self.assertEqual((f.type, f.request_id, f.payload), (w.MsgType.PREDICT, 99, p))

    def test_standard_request_values(self):
        rng = random.Random(2)
        shared, items = standard_request(rng, values=True)
        p = w.encode_predict("ctr", shared, items)
        self.assertEqual(len(p), len(w.encode_predict(
            "ctr", w.Block(shared.ids), [w.Block(b.ids) for b in items])) + 4 * 40300)
        r = w.decode_predict(p)
        self.assertEqual(r.shared, shared)
        self.assertEqual(r.items, items)

    def test_mixed_blocks(self):
        items = [[], ([3, 1], [1.5, -1.0]), [2**64 - 1]]
        r = w.decode_predict(w.encode_predict("a", [], items))
        self.assertEqual(r.items, [w.Block([]), w.Block([1, 3], [-1.0, 1.5]),
                                   w.Block([2**64 - 1])])

    def raw_predict(self, name=b"m", version=0, items=1, blocks=None):
        if blocks is None:
            blocks = b"\x00\x00" * (1 + (items if isinstance(items, int) else 0))
        return (bytes([len(name)]) + name + struct.pack("<Q", version)
                + w.encode_varint(items) + blocks)

    def test_names(self):
        self.assertEqual(w.decode_predict(self.raw_predict(b"A-z_0.9")).model, "A-z_0.9")
        self.assertEqual(w.decode_predict(self.raw_predict(b"x" * 64)).model, "x" * 64)
        for bad in (b"", b"x" * 65, b"a b", b"a/b", b"caf\xc3\xa9", b"a\x00", b"x" * 255):
            with self.subTest(name=bad):
                self.assertWireError(E.BAD_NAME, w.decode_predict, self.raw_predict(bad))
        for bad in ("", "x" * 65, "a b"):
            self.assertWireError(E.BAD_NAME, w.encode_predict, bad, [], [[]])
        # check=False lets tests send the bad name anyway
        p = w.encode_predict("a b", [], [[]], check=False)
        self.assertWireError(E.BAD_NAME, w.decode_predict, p)

    def test_items_count(self):
        self.assertWireError(E.NO_ITEMS, w.decode_predict, self.raw_predict(items=0))
        self.assertWireError(E.NO_ITEMS, w.encode_predict, "m", [], [])
        ok = self.raw_predict(items=w.MAX_ITEMS)
        self.assertEqual(len(w.decode_predict(ok).items), w.MAX_ITEMS)
        self.assertWireError(E.TOO_MANY_ITEMS, w.decode_predict,
                             self.raw_predict(items=w.MAX_ITEMS + 1))
        self.assertWireError(E.TOO_MANY_ITEMS, w.encode_predict, "m", [],
                             [[]] * (w.MAX_ITEMS + 1))
        self.assertWireError(E.BAD_VARINT, w.decode_predict,
                             self.raw_predict(blocks=b"")[:-1] + b"\xff" * 10)
        self.assertWireError(E.TRUNCATED, w.decode_predict,
                             self.raw_predict(blocks=b"")[:-1] + b"\xff" * 9)
        # the limits come before the size check: nothing after the count is needed to see them
        self.assertWireError(E.NO_ITEMS, w.decode_predict, self.raw_predict(items=0, blocks=b""))
        self.assertWireError(E.TOO_MANY_ITEMS, w.decode_predict,
                             self.raw_predict(items=w.MAX_ITEMS + 1, blocks=b""))
        self.assertWireError(E.TOO_MANY_ITEMS, w.decode_predict,
                             self.raw_predict(items=2**64 - 1, blocks=b""))

    def test_items_size_checked_before_blocks(self):
        # docs/wire.md "Decoding order": each item block takes at least 2 bytes, so `items`
        # with fewer than 2 * items bytes left is TRUNCATED before the shared block is read
        self.assertWireError(E.TRUNCATED, w.decode_predict,
                             self.raw_predict(items=w.MAX_ITEMS, blocks=b""))
        self.assertWireError(E.TRUNCATED, w.decode_predict,
                             self.raw_predict(items=w.MAX_ITEMS, blocks=b"\x00\x00" * 4096))
        self.assertEqual(len(w.decode_predict(
            self.raw_predict(items=w.MAX_ITEMS, blocks=b"\x00\x00" * 4097)).items), 4096)
        # a bad shared block is not reached when the count already cannot fit ...
        bad_shared = b"\x00\x04"                       # undefined block_flags bit
        self.assertWireError(E.TRUNCATED, w.decode_predict,
                             self.raw_predict(items=4, blocks=bad_shared + b"\x00\x00" * 2))
        # ... and is reported once it can (2 * 4 = 8 bytes left, the shared block is first)
        self.assertWireError(E.BAD_VALUE, w.decode_predict,
                             self.raw_predict(items=4, blocks=bad_shared + b"\x00\x00" * 3))
        dup_shared = b"\x02\x00\x05\x00"
        self.assertWireError(E.TRUNCATED, w.decode_predict,
                             self.raw_predict(items=3, blocks=dup_shared + b"\x00"))
        self.assertWireError(E.UNSORTED_FEATURES, w.decode_predict,
                             self.raw_predict(items=3, blocks=dup_shared + b"\x00\x00"))

    def test_request_feature_limit(self):
        # 16 full blocks = MAX_REQUEST_FEATURES exactly; one more feature is one too many
        full = w.encode_varint(w.MAX_BLOCK_FEATURES) + b"\x00\x00" + b"\x01" * 65535
        self.assertEqual(16 * w.MAX_BLOCK_FEATURES, w.MAX_REQUEST_FEATURES)
        ok = self.raw_predict(items=15, blocks=full * 16)
        r = w.decode_predict(ok)
        self.assertEqual(len(r.items), 15)
        bad = self.raw_predict(items=16, blocks=full * 16 + b"\x01\x00\x00")
        self.assertWireError(E.TOO_MANY_FEATURES, w.decode_predict, bad)

    def test_truncated_and_trailing(self):
        p = w.encode_predict("model", [1, 2], [[3], ([4], [2.0])], version=3)
        w.decode_predict(p)
        self.assertWireError(E.TRAILING_BYTES, w.decode_predict, p + b"\x00")
        for cut in range(len(p)):
            with self.subTest(cut=cut):
                # every cut runs some field (name, version, count, block) past the payload
                self.assertWireError(E.TRUNCATED, w.decode_predict, p[:cut])
        self.assertWireError(E.TRUNCATED, w.decode_predict, p[:10])  # inside version
        self.assertWireError(E.TRUNCATED, w.decode_predict, p[:3])   # inside the name

    def test_fewer_blocks_than_items(self):
        # 6 bytes pass the size check for 3 items (2 each), but the 3rd item's count is missing
        self.assertWireError(E.TRUNCATED, w.decode_predict,
                             self.raw_predict(items=3, blocks=b"\x00\x00" * 3))
        # 5 bytes fail the size check itself
        self.assertWireError(E.TRUNCATED, w.decode_predict,
                             self.raw_predict(items=3, blocks=b"\x00\x00" * 2 + b"\x00"))

    def test_trailing_checked_last(self):
        p = w.encode_predict("m", [1], [[2]])
        for bad in (self.raw_predict(items=1, blocks=b"\x02\x00\x05\x00\x00\x00" + b"junk"),
                    self.raw_predict(items=1, blocks=b"\x00\x00\x01\x01\x01"
                                     + struct.pack("<f", math.nan) + b"junk")):
            with self.assertRaises(w.WireError) as cm:
                w.decode_predict(bad)
            self.assertNotEqual(cm.exception.code, E.TRAILING_BYTES)
        self.assertWireError(E.TRAILING_BYTES, w.decode_predict, p + b"junk")


# ---------------------------------------------------------------------------------------------
class TestOtherMessages(WireErrorMixin, unittest.TestCase):
    def test_predict_result(self):
        scores = [0.0, 1.0, 0.5, 0.125, 2.0**-20]
        p = w.encode_predict_result(12, scores)
        self.assertEqual(p, struct.pack("<Q", 12) + b"\x05" + struct.pack("<5f", *scores))
        self.assertEqual(w.decode_predict_result(p), w.PredictResult(12, scores))
        self.assertWireError(E.TRAILING_BYTES, w.decode_predict_result, p + b"\x00")
        self.assertWireError(E.TRUNCATED, w.decode_predict_result, p[:-1])
        self.assertWireError(E.TRUNCATED, w.decode_predict_result, p[:7])
        for bad in (1.5, -0.25, math.nan, math.inf):
            self.assertWireError(E.BAD_VALUE, w.encode_predict_result, 1, [0.5, bad])
            bp = w.encode_predict_result(1, [0.5, bad], check=False)
            self.assertWireError(E.BAD_VALUE, w.decode_predict_result, bp)
            self.assertEqual(len(w.decode_predict_result(bp, check_scores=False).scores), 2)
            # wire order: the scores come before the trailing-bytes check
            self.assertWireError(E.BAD_VALUE, w.decode_predict_result, bp + b"\x00")
            self.assertWireError(E.TRAILING_BYTES, w.decode_predict_result, bp + b"\x00",
                                 check_scores=False)
        self.assertEqual(w.decode_predict_result(w.encode_predict_result(1, [-0.0])).scores,
                         [-0.0])
        self.assertWireError(E.TOO_MANY_ITEMS, w.decode_predict_result,
                             struct.pack("<Q", 0) + w.encode_varint(w.MAX_ITEMS + 1))
        ok = w.encode_predict_result(0, [1.0] * w.MAX_ITEMS)
        self.assertEqual(len(w.decode_predict_result(ok).scores), w.MAX_ITEMS)
        self.assertWireError(E.TOO_MANY_ITEMS, w.encode_predict_result, 0,
                             [1.0] * (w.MAX_ITEMS + 1))

    def test_predict_result_count(self):
        # 1..MAX_ITEMS: 0 items is NO_ITEMS, on both sides
        zero = struct.pack("<Q", 5) + b"\x00"
        self.assertWireError(E.NO_ITEMS, w.decode_predict_result, zero)
        self.assertWireError(E.NO_ITEMS, w.decode_predict_result, zero + b"\x00" * 4)
        self.assertWireError(E.NO_ITEMS, w.encode_predict_result, 5, [])
        self.assertEqual(w.encode_predict_result(5, [], check=False), zero)
        # 4 bytes per score are checked before any score is read: TRUNCATED, not BAD_VALUE
        bad = struct.pack("<Q", 5) + b"\x03" + struct.pack("<2f", 0.5, math.nan)
        self.assertWireError(E.TRUNCATED, w.decode_predict_result, bad)
        self.assertWireError(E.BAD_VALUE, w.decode_predict_result,
                             bad + struct.pack("<f", 0.5))
        self.assertWireError(E.TRUNCATED, w.decode_predict_result,
                             struct.pack("<Q", 5) + w.encode_varint(w.MAX_ITEMS))
        self.assertWireError(E.TRUNCATED, w.decode_predict_result, struct.pack("<Q", 5) + b"\x80")

    def test_train(self):
        samples = [(1.0, [5, 3]), (0.0, ([9], [2.0])), (1.0, [])]
        p = w.encode_train("ctr", [1], samples)
        self.assertEqual(p[:5], b"\x03ctr\x03")
        r = w.decode_train(p)
        self.assertEqual(r.model, "ctr")
        self.assertEqual(r.shared, w.Block([1]))
        self.assertEqual(r.samples, [(1.0, w.Block([3, 5])), (0.0, w.Block([9], [2.0])),
                                     (1.0, w.Block([]))])
        self.assertWireError(E.BAD_VALUE, w.encode_train, "ctr", [], [(0.5, [])])
        bad = w.encode_train("ctr", [], [(0.5, [])], check=False)
        self.assertWireError(E.BAD_VALUE, w.decode_train, bad)
        bad = w.encode_train("ctr", [], [(math.nan, [])], check=False)
        self.assertWireError(E.BAD_VALUE, w.decode_train, bad)
        self.assertWireError(w.TRAIN_NO_SAMPLES_ERROR, w.decode_train, b"\x03ctr\x00\x00\x00")
        self.assertEqual(w.TRAIN_NO_SAMPLES_ERROR, E.NO_ITEMS)
        self.assertEqual(w.TRAIN_TOO_MANY_SAMPLES_ERROR, E.TOO_MANY_ITEMS)
        self.assertWireError(E.TOO_MANY_ITEMS, w.decode_train,
                             b"\x03ctr" + w.encode_varint(w.MAX_ITEMS + 1))
        self.assertWireError(E.TRAILING_BYTES, w.decode_train, p + b"\x00")
        self.assertWireError(E.TRUNCATED, w.decode_train, p[:-1])
        for cut in range(len(p)):
            with self.subTest(cut=cut):
                self.assertWireError(E.TRUNCATED, w.decode_train, p[:cut])
        # -0.0 equals 0.0: a valid label
        r = w.decode_train(w.encode_train("ctr", [], [(-0.0, [])]))
        self.assertEqual(r.samples, [(0.0, w.Block([]))])

    def test_train_samples_size_checked_before_blocks(self):
        # each sample takes at least 6 bytes (label 4, block 2): `samples` with fewer than
        # 6 * samples bytes left (counted from after `samples`, shared block included) is
        # TRUNCATED before the shared block or any label is read
        head = b"\x03ctr\x02"
        bad_shared = b"\x00\x04"  # undefined block_flags bit
        ok_sample = struct.pack("<f", 1.0) + b"\x00\x00"
        self.assertWireError(E.TRUNCATED, w.decode_train, head + bad_shared + ok_sample + b"\x00")
        self.assertWireError(E.BAD_VALUE, w.decode_train, head + bad_shared + ok_sample * 2)
        bad_label = struct.pack("<f", 0.5) + b"\x00\x00"
        self.assertWireError(E.TRUNCATED, w.decode_train, head + b"\x00\x00" + bad_label
                             + b"\x00" * 3)                      # 11 bytes < 12
        self.assertWireError(E.BAD_VALUE, w.decode_train, head + b"\x00\x00" + bad_label
                             + b"\x00" * 4)                      # 12 bytes
        self.assertWireError(E.TRUNCATED, w.decode_train,
                             b"\x03ctr" + w.encode_varint(w.MAX_ITEMS) + b"\x00" * 100)
        # a label is checked before its block
        self.assertWireError(E.BAD_VALUE, w.decode_train,
                             b"\x03ctr\x01\x00\x00" + struct.pack("<f", 2.0) + b"\x02\x00")

    def test_train_ack(self):
        for v in (0, 1, 200, 4096):
            self.assertEqual(w.decode_train_ack(w.encode_train_ack(v)), v)
        self.assertWireError(E.TRAILING_BYTES, w.decode_train_ack, b"\x01\x00")
        self.assertWireError(E.TRUNCATED, w.decode_train_ack, b"")
        self.assertWireError(E.TRUNCATED, w.decode_train_ack, b"\x80\x80")
        self.assertWireError(E.BAD_VARINT, w.decode_train_ack, b"\xff" * 11)
        # accepted is 0..MAX_ITEMS: over is TOO_MANY_ITEMS, checked before trailing bytes
        for v in (w.MAX_ITEMS + 1, 2**64 - 1):
            self.assertWireError(E.TOO_MANY_ITEMS, w.decode_train_ack, w.encode_varint(v))
            self.assertWireError(E.TOO_MANY_ITEMS, w.decode_train_ack,
                                 w.encode_varint(v) + b"\x00")
        self.assertWireError(E.TOO_MANY_ITEMS, w.encode_train_ack, w.MAX_ITEMS + 1)
        self.assertEqual(w.encode_train_ack(w.MAX_ITEMS + 1, check=False),
                         w.encode_varint(w.MAX_ITEMS + 1))

    def test_error(self):
        p = w.encode_error(E.UNKNOWN_MODEL, "no model 'x' is loaded")
        self.assertEqual(p[:4], b"\x0a\x00\x16\x00")
        self.assertEqual(w.decode_error(p), w.ErrorMessage(10, "no model 'x' is loaded"))
        self.assertEqual(w.decode_error(w.encode_error(19, "")), (19, ""))
        self.assertEqual(w.decode_error(w.encode_error(999, "é")), (999, "é"))
        self.assertEqual(w.error_name(999), "UNKNOWN_ERROR_999")
        self.assertEqual(w.decode_error(b"\x01\x00\x01\x00\xff").message, "\ufffd")
        m = "x" * w.MAX_ERROR_MSG
        self.assertEqual(w.decode_error(w.encode_error(1, m)).message, m)
        self.assertEqual(w.OVERSIZE_FIELD_ERROR, E.BAD_VALUE)
        self.assertWireError(E.BAD_VALUE, w.encode_error, 1, m + "x")
        self.assertWireError(E.BAD_VALUE, w.decode_error,
                             struct.pack("<HH", 1, 1025) + b"x" * 1025)
        # msg_len is checked before the message is looked for: BAD_VALUE, not TRUNCATED
        self.assertWireError(E.BAD_VALUE, w.decode_error, struct.pack("<HH", 1, 0xFFFF))
        self.assertEqual(w.encode_error(1, m + "x", check=False)[:4], struct.pack("<HH", 1, 1025))
        self.assertWireError(E.TRUNCATED, w.decode_error, p[:-1])
        self.assertWireError(E.TRUNCATED, w.decode_error, p[:3])
        self.assertWireError(E.TRUNCATED, w.decode_error, b"")
        self.assertWireError(E.TRUNCATED, w.decode_error, b"\x01")
        self.assertWireError(E.TRAILING_BYTES, w.decode_error, p + b"!")
        self.assertEqual(w.decode_error(w.encode_error(0xFFFF, "x")).code, 0xFFFF)

    def test_error_code_zero(self):
        # ERROR code is 1..65535; 0 is BAD_VALUE, on both sides
        self.assertWireError(E.BAD_VALUE, w.encode_error, 0, "x")
        zero = w.encode_error(0, "x", check=False)
        self.assertEqual(zero, b"\x00\x00\x01\x00x")
        self.assertWireError(E.BAD_VALUE, w.decode_error, zero)
        # wire order: code comes first, before msg_len, msg and trailing bytes
        self.assertWireError(E.BAD_VALUE, w.decode_error, zero + b"!")
        self.assertWireError(E.BAD_VALUE, w.decode_error, zero[:-1])
        self.assertWireError(E.BAD_VALUE, w.decode_error, struct.pack("<HH", 0, 2000))
        # ... even when msg_len itself is cut off (the C codec says TRUNCATED here: it reads
        # code and msg_len together; docs/wire.md's wire order puts code first)
        self.assertWireError(E.BAD_VALUE, w.decode_error, b"\x00\x00")
        self.assertWireError(E.TRUNCATED, w.decode_error, b"\x00")

    def test_ping_pong(self):
        for pl in (b"", b"x", bytes(range(64))):
            self.assertEqual(w.decode_pong(w.encode_ping(pl)), pl)
        self.assertWireError(E.BAD_VALUE, w.encode_ping, b"x" * 65)
        self.assertWireError(E.BAD_VALUE, w.decode_pong, b"x" * 65)
        self.assertWireError(E.BAD_VALUE, w.decode_ping, b"x" * 65)
        self.assertWireError(E.BAD_VALUE, w.encode_pong, b"x" * 1000)
        self.assertEqual(w.encode_ping(b"x" * 65, check=False), b"x" * 65)


# ---------------------------------------------------------------------------------------------
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_P_HEAD = b"\x01m" + struct.pack("<Q", 0)        # PREDICT name "m", version 0
_T_HEAD = b"\x01m"                               # TRAIN name "m"
_R_HEAD = struct.pack("<Q", 0)                   # PREDICT_RESULT version 0

# (what, message type, payload, code) for decode_message: bad payloads where the
# "Decoding order" rules decide the code.  Each code here was checked against the C decoder
# (codec_decode_frame, codec/*.c) on the same frame, so the two implementations agree on them.
DECODING_ORDER_CASES = [
    ("items varint cut off", 1, _P_HEAD + b"\x80", E.TRUNCATED),
    ("items varint over 10 bytes", 1, _P_HEAD + b"\x80" * 10 + b"\x00", E.BAD_VARINT),
    ("items 0", 1, _P_HEAD + b"\x00", E.NO_ITEMS),
    ("items over MAX_ITEMS, nothing after", 1, _P_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("items 4096, 8191 bytes", 1, _P_HEAD + w.encode_varint(4096) + b"\x00" * 8191,
     E.TRUNCATED),
    ("items 4 < 8 bytes, bad shared flags", 1, _P_HEAD + b"\x04\x00\x04" + b"\x00" * 4,
     E.TRUNCATED),
    ("items 4 = 8 bytes, bad shared flags", 1, _P_HEAD + b"\x04\x00\x04" + b"\x00" * 6,
     E.BAD_VALUE),
    ("block count over limit, flags bad", 1, _P_HEAD + b"\x01" + w.encode_varint(65537) + b"\x02",
     E.TOO_MANY_FEATURES),
    ("block flags bad, too few bytes", 1, _P_HEAD + b"\x01\x05\x04\x00\x00", E.BAD_VALUE),
    ("block flags missing", 1, _P_HEAD + b"\x01\x00\x00\x05", E.TRUNCATED),
    ("block n=3 in 2 bytes, duplicate", 1, _P_HEAD + b"\x01\x03\x00\x05\x00", E.TRUNCATED),
    ("block n=2 in 2 bytes, duplicate", 1, _P_HEAD + b"\x01\x00\x00\x02\x00\x05\x00",
     E.UNSORTED_FEATURES),
    ("block values: 9 < 10 bytes, NaN", 1, _P_HEAD + b"\x01\x00\x00\x02\x01\x01\x01"
     + struct.pack("<f", math.nan) + b"\x00\x00\x00", E.TRUNCATED),
    ("block values run past after long deltas", 1, _P_HEAD + b"\x01\x00\x00\x02\x01"
     + w.encode_varint(2**40) + b"\x01" + b"\x00" * 3, E.TRUNCATED),
    ("NaN value, then trailing", 1, _P_HEAD + b"\x01\x00\x00\x01\x01\x01"
     + struct.pack("<f", math.nan) + b"!", E.BAD_VALUE),
    ("trailing bytes", 1, _P_HEAD + b"\x01\x00\x00\x00\x00!", E.TRAILING_BYTES),
    ("result 0 items", 2, _R_HEAD + b"\x00" + struct.pack("<f", 0.5), E.NO_ITEMS),
    ("result over MAX_ITEMS", 2, _R_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("result 3 scores in 8 bytes, NaN", 2, _R_HEAD + b"\x03" + struct.pack("<2f", 0.5, math.nan),
     E.TRUNCATED),
    ("result bad score, then trailing", 2, _R_HEAD + b"\x01" + struct.pack("<f", 1.5) + b"!",
     E.BAD_VALUE),
    ("result trailing", 2, _R_HEAD + b"\x01" + struct.pack("<f", 1.0) + b"!", E.TRAILING_BYTES),
    ("train 0 samples", 3, _T_HEAD + b"\x00\x00\x00", E.NO_ITEMS),
    ("train over MAX_ITEMS", 3, _T_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("train 2 samples < 12 bytes, bad shared", 3, _T_HEAD + b"\x02\x00\x04" + b"\x00" * 9,
     E.TRUNCATED),
    ("train 2 samples = 12 bytes, bad shared", 3, _T_HEAD + b"\x02\x00\x04" + b"\x00" * 10,
     E.BAD_VALUE),
    ("train bad label before its block", 3, _T_HEAD + b"\x01\x00\x00" + struct.pack("<f", 0.5)
     + b"\x05\x00", E.BAD_VALUE),
    ("train_ack cut off", 4, b"\x80", E.TRUNCATED),
    ("train_ack over MAX_ITEMS", 4, w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("train_ack over MAX_ITEMS, then trailing", 4, w.encode_varint(4097) + b"!",
     E.TOO_MANY_ITEMS),
    ("train_ack trailing", 4, b"\x01!", E.TRAILING_BYTES),
    ("error code 0", 7, b"\x00\x00\x01\x00x", E.BAD_VALUE),
    ("error code 0, msg_len over", 7, struct.pack("<HH", 0, 2000), E.BAD_VALUE),
    ("error msg_len over, msg missing", 7, struct.pack("<HH", 5, 1025), E.BAD_VALUE),
    ("error msg cut off", 7, struct.pack("<HH", 5, 10) + b"x", E.TRUNCATED),
    ("error trailing", 7, struct.pack("<HH", 5, 1) + b"xy", E.TRAILING_BYTES),
    ("ping over 64", 8, b"x" * 65, E.BAD_VALUE),
    ("pong over 64", 9, b"x" * 65, E.BAD_VALUE),
    ("lookup is not accepted", 5, b"", E.UNKNOWN_TYPE),
    ("unknown type", 42, b"abc", E.UNKNOWN_TYPE),
]

# (what, type, flags, payload, code): the same for FEEDBACK, FEEDBACK_ACK and the flagged
# layouts of PREDICT (LOG: impression id first) and TRAIN (WEIGHTS: a weight after each label);
# the same cases are in tests/codec/test_feedback.c against the C decoder.
_EV = struct.Struct("<QBff")                     # an event with a 1-byte item varint
_FB_HEAD = b"\x03ctr"                           # FEEDBACK name "ctr"
FLAGGED_DECODING_ORDER_CASES = [
    ("log id cut off", 1, 1, b"\x05\x00\x00\x00", E.TRUNCATED),
    ("log id 0 before a bad name", 1, 1, struct.pack("<Q", 0) + b"\x00", E.BAD_VALUE),
    ("log id, then bad name", 1, 1, struct.pack("<Q", 9) + b"\x00", E.BAD_NAME),
    ("log id, then items 0", 1, 1, struct.pack("<Q", 9) + _P_HEAD + b"\x00", E.NO_ITEMS),
    ("weights: 1 sample < 10 bytes", 3, 1, _T_HEAD + b"\x01\x00\x00" + struct.pack("<f", 1.0)
     + b"\x00\x00", E.TRUNCATED),
    ("weight negative before a bad block", 3, 1, _T_HEAD + b"\x01\x00\x00"
     + struct.pack("<ff", 1.0, -1.0) + b"\x07\x09", E.BAD_VALUE),
    ("weight over 1e6", 3, 1, _T_HEAD + b"\x01\x00\x00" + struct.pack("<ff", 1.0, 1.5e6)
     + b"\x00\x00", E.BAD_VALUE),
    ("weight NaN", 3, 1, _T_HEAD + b"\x01\x00\x00" + struct.pack("<ff", 1.0, math.nan)
     + b"\x00\x00", E.BAD_VALUE),
    ("bad label before its weight", 3, 1, _T_HEAD + b"\x01\x00\x00"
     + struct.pack("<ff", 0.5, -1.0) + b"\x00\x00", E.BAD_VALUE),
    ("feedback bad name", 10, 0, b"\x00", E.BAD_NAME),
    ("feedback events cut off", 10, 0, _FB_HEAD, E.TRUNCATED),
    ("feedback 0 events", 10, 0, _FB_HEAD + b"\x00" + _EV.pack(0, 0, 2.0, -1.0), E.NO_ITEMS),
    ("feedback over MAX_ITEMS", 10, 0, _FB_HEAD + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("feedback 2 events < 34 bytes, bad id", 10, 0, _FB_HEAD + b"\x02" + _EV.pack(0, 0, 0.0, 1.0)
     + b"\x00", E.TRUNCATED),
    ("feedback id 0 before bad item", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 0)
     + w.encode_varint(9999) + struct.pack("<ff", 0.5, -1.0), E.BAD_VALUE),
    ("feedback item 4096", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 3)
     + w.encode_varint(4096) + struct.pack("<ff", 1.0, 1.0), E.BAD_VALUE),
    ("feedback item over 10 bytes", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 3)
     + b"\xff" * 10 + b"\x01" + struct.pack("<ff", 1.0, 1.0), E.BAD_VARINT),
    ("feedback label before weight", 10, 0, _FB_HEAD + b"\x01" + _EV.pack(3, 1, 0.5, -1.0),
     E.BAD_VALUE),
    ("feedback weight inf", 10, 0, _FB_HEAD + b"\x01" + _EV.pack(3, 1, 1.0, math.inf),
     E.BAD_VALUE),
    ("feedback weight short after a long item", 10, 0, _FB_HEAD + b"\x01" + struct.pack("<Q", 3)
     + w.encode_varint(300) + struct.pack("<f", 1.0) + b"\x00\x00\x00", E.TRUNCATED),
    ("feedback trailing", 10, 0, _FB_HEAD + b"\x01" + _EV.pack(3, 1, -0.0, 0.0) + b"!",
     E.TRAILING_BYTES),
    ("ack empty", 11, 0, b"", E.TRUNCATED),
    ("ack accepted over, nothing after", 11, 0, w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("ack refused cut off", 11, 0, b"\x01", E.TRUNCATED),
    ("ack refused over", 11, 0, b"\x01" + w.encode_varint(4097), E.TOO_MANY_ITEMS),
    ("ack 0 events", 11, 0, b"\x00\x00", E.NO_ITEMS),
    ("ack sum over MAX_ITEMS", 11, 0, w.encode_varint(4000) + w.encode_varint(97),
     E.TOO_MANY_ITEMS),
    ("ack 2 refusals < 4 bytes", 11, 0, b"\x01\x02\x00\x09\x01", E.TRUNCATED),
    ("ack not ascending before a bad reason", 11, 0, b"\x01\x02\x01\x01\x01\x09",
     E.BAD_VALUE),
    ("ack index = events", 11, 0, b"\x01\x01\x02\x01", E.BAD_VALUE),
    ("ack reason 0", 11, 0, b"\x01\x01\x01\x00", E.BAD_VALUE),
    ("ack reason 5", 11, 0, b"\x01\x01\x01\x05", E.BAD_VALUE),
    ("ack trailing", 11, 0, b"\x01\x01\x00\x03\x00", E.TRAILING_BYTES),
]

# tests/fuzz/corpus/codec/<name>: the C decoder's verdict on each seed frame (codec_decode_frame,
# checked by running it).  None: decodes.  bad-truncated is shorter than its payload_len: the C
# stream decoder says NEED_MORE, the package's whole-frame decoder TRUNCATED.
CORPUS_VERDICTS = {
    "bad-duplicate-id": E.UNSORTED_FEATURES, "bad-flags": E.BAD_HEADER,
    "bad-magic": E.BAD_MAGIC, "bad-name": E.BAD_NAME, "bad-nan-value": E.BAD_VALUE,
    "bad-no-items": E.NO_ITEMS, "bad-reserved": E.BAD_HEADER,
    "bad-trailing": E.TRAILING_BYTES, "bad-truncated": E.TRUNCATED,
    "bad-truncated-payload": E.TRUNCATED, "bad-type": E.UNKNOWN_TYPE,
    "bad-varint": E.BAD_VARINT, "bad-version": E.BAD_VERSION,
    "bad-feedback-item": E.BAD_VALUE, "bad-feedback-ack-order": E.BAD_VALUE,
    "bad-feedback-weight-nan": E.BAD_VALUE,
}


class TestCrossCheck(WireErrorMixin, unittest.TestCase):
    """The package's codec against the C side's data: codec/test_vectors.txt, the codec fuzz
    seed corpus and decoding-order cases whose codes the C decoder gives."""

    def test_codec_test_vectors_file(self):
        path = os.path.join(REPO, "codec", "test_vectors.txt")
        if not os.path.exists(path):
            self.skipTest("no %s" % path)
        rows = []
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("frame "):
                    continue              # frame vectors: test_codec_frame_vectors
                field, raw, fid = line.split()
                rows.append((int(field), b"" if raw == "-" else bytes.fromhex(raw), int(fid, 16)))
        self.assertGreaterEqual(len(rows), 11)
        for field, raw, fid in rows:
            with self.subTest(field=field, raw=raw):
                self.assertEqual(w.feature_id(field, raw), fid)
        # the table in docs/wire.md is in the file too (the file "carries the same vectors")
        doc = {(0, b""), (0, b"a"), (1, b"a"), (2, b"68fd1e64"), (5, b"1"), (13, b"0"),
               (13, b"-1"), (38, b"e5ba7672"), (200, b"tlserve"), (255, b"hello, world"),
               (7, "\u00dcnic\u00f6de".encode())}
        self.assertLessEqual(doc, {(f, r) for f, r, _ in rows})

    def test_codec_frame_vectors(self):
        # "frame <name> <verdict> <hex>" lines of codec/test_vectors.txt, which the C codec
        # replays too (tests/codec/test_feedback.c): same verdicts, and a valid frame's payload
        # re-encodes to the same bytes with this package's encoders.
        path = os.path.join(REPO, "codec", "test_vectors.txt")
        rows = []
        with open(path) as f:
            for line in f:
                if line.startswith("frame "):
                    _, name, verdict, hx = line.split()
                    rows.append((name, verdict, bytes.fromhex(hx)))
        self.assertGreaterEqual(len(rows), 20)
        seen = set()
        for name, verdict, frame in rows:
            with self.subTest(name=name):
                if verdict != "OK":
                    self.assertWireError(E[verdict], w.decode_message, frame)
                    continue
                f, msg = w.decode_message(frame)
                seen.add(f.type)
                self.assertEqual(self.reencode(f, msg), f.payload)
        self.assertLessEqual({w.MsgType.PREDICT, w.MsgType.TRAIN, w.MsgType.FEEDBACK,
                              w.MsgType.FEEDBACK_ACK}, seen)

    @staticmethod
    def reencode(f, msg):
        if f.type == w.MsgType.PREDICT:
            self_flags = w.predict_flags(msg.impression_id)
            assert self_flags == f.flags
            return w.encode_predict(msg.model, msg.shared, msg.items, msg.version,
                                    impression_id=msg.impression_id)
        if f.type == w.MsgType.TRAIN:
            assert w.train_flags(msg.weights) == f.flags
            return w.encode_train(msg.model, msg.shared, msg.samples, weights=msg.weights)
        if f.type == w.MsgType.FEEDBACK:
            return w.encode_feedback(msg.model, msg.events)
        if f.type == w.MsgType.FEEDBACK_ACK:
            return w.encode_feedback_ack(msg.accepted, msg.refused)
        raise AssertionError("no re-encoder for type %d" % f.type)

    def test_flagged_decoding_order_cases(self):
        for what, mtype, flags, payload, code in FLAGGED_DECODING_ORDER_CASES:
            with self.subTest(what=what):
                self.assertWireError(code, w.decode_message,
                                     w.encode_frame(mtype, 1, payload, flags))

    def test_fuzz_corpus(self):
        d = os.path.join(REPO, "tests", "fuzz", "corpus", "codec")
        if not os.path.isdir(d):
            self.skipTest("no %s" % d)
        names = sorted(os.listdir(d))
        self.assertTrue(names)
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                frame = f.read()
            with self.subTest(name=name):
                if name.startswith("valid-"):
                    fr, msg = w.decode_message(frame)
                    self.assertIsNotNone(msg)
                else:
                    self.assertTrue(name.startswith("bad-"), name)
                    self.assertIn(name, CORPUS_VERDICTS, "add the C verdict for this seed")
                    self.assertWireError(CORPUS_VERDICTS[name], w.decode_message, frame)

    def test_decoding_order_cases(self):
        for what, mtype, payload, code in DECODING_ORDER_CASES:
            with self.subTest(what=what):
                self.assertWireError(code, w.decode_message, w.encode_frame(mtype, 1, payload))

    def test_decode_message_valid(self):
        p = w.encode_predict("m", [1], [[2], ([3], [0.5])], version=4)
        f, msg = w.decode_message(w.encode_frame(w.MsgType.PREDICT, 9, p))
        self.assertEqual((f.type, f.request_id), (w.MsgType.PREDICT, 9))
        self.assertEqual(msg, w.decode_predict(p))
        f, msg = w.decode_message(w.encode_frame(w.MsgType.TRAIN_ACK, 3, w.encode_train_ack(7)))
        self.assertEqual(msg, 7)
        self.assertWireError(E.TRUNCATED, w.decode_message,
                             w.encode_frame(w.MsgType.TRAIN_ACK, 3, b"\x07")[:-1])


# ---------------------------------------------------------------------------------------------
class FakeServer:
    """A loopback stand-in for tlserve, just enough to exercise Client: answers PING with PONG,
    PREDICT with one score per item (0.5) after collecting `batch` requests (then answers them
    in reverse order), FEEDBACK by joining its events to the LOG PREDICTs it saw (the refusal
    reasons UNKNOWN_IMPRESSION, ITEM_OUT_OF_RANGE, WRONG_MODEL, DUPLICATE), and any bad header
    with ERROR(id 0) + close."""

    def __init__(self, batch=1):
        self.batch = batch
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.received = []
        self.logged = {}        # impression id -> (model, items)
        self.labelled = set()   # (impression id, item)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def recv_exact(self, c, n):
        buf = b""
        while len(buf) < n:
            chunk = c.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def run(self):
        c, _ = self.lsock.accept()
        queue = []
        with c:
            while True:
                hdr = self.recv_exact(c, w.HEADER_SIZE)
                if hdr is None:
                    return
                try:
                    h = w.parse_header(hdr)
                except w.WireError as e:
                    c.sendall(w.encode_frame(w.MsgType.ERROR, 0, w.encode_error(e.code, e.message)))
                    # lingering close: a close() with unread input sends RST, which can
                    # destroy the ERROR frame before the client reads it
                    c.shutdown(socket.SHUT_WR)
                    c.settimeout(1.0)
                    try:
                        while c.recv(65536):
                            pass
                    except OSError:
                        pass
                    return
                payload = self.recv_exact(c, h.payload_len) if h.payload_len else b""
                self.received.append((h, payload))
                if h.type == w.MsgType.PING:
                    c.sendall(w.encode_frame(w.MsgType.PONG, h.request_id, payload))
                elif h.type == w.MsgType.PREDICT:
                    try:
                        req = w.decode_predict(payload, h.flags)
                        if req.model != "ctr":
                            raise w.WireError(E.UNKNOWN_MODEL, "no model %r" % req.model)
                        if req.impression_id:
                            self.logged[req.impression_id] = (req.model, len(req.items))
                        out = w.encode_frame(w.MsgType.PREDICT_RESULT, h.request_id,
                                             w.encode_predict_result(3, [0.5] * len(req.items)))
                    except w.WireError as e:
                        out = w.encode_frame(w.MsgType.ERROR, h.request_id,
                                             w.encode_error(e.code, e.message))
                    queue.append(out)
                    if len(queue) >= self.batch:
                        for out in reversed(queue):
                            c.sendall(out)
                        queue.clear()
                elif h.type == w.MsgType.FEEDBACK:
                    try:
                        out = w.encode_frame(w.MsgType.FEEDBACK_ACK, h.request_id,
                                             self.join(w.decode_feedback(payload)))
                    except w.WireError as e:
                        out = w.encode_frame(w.MsgType.ERROR, h.request_id,
                                             w.encode_error(e.code, e.message))
                    c.sendall(out)
                else:
                    c.sendall(w.encode_frame(w.MsgType.ERROR, h.request_id,
                                             w.encode_error(E.UNKNOWN_TYPE, "type %d" % h.type)))

    def join(self, fb):
        refused = []
        for i, ev in enumerate(fb.events):
            model, items = self.logged.get(ev.impression_id, (None, 0))
            if model is None:
                refused.append((i, w.Refusal.UNKNOWN_IMPRESSION))
            elif ev.item >= items:
                refused.append((i, w.Refusal.ITEM_OUT_OF_RANGE))
            elif model != fb.model:
                refused.append((i, w.Refusal.WRONG_MODEL))
            elif (ev.impression_id, ev.item) in self.labelled:
                refused.append((i, w.Refusal.DUPLICATE))
            else:
                self.labelled.add((ev.impression_id, ev.item))
        return w.encode_feedback_ack(len(fb.events) - len(refused), refused)

    def close(self):
        self.lsock.close()
        self.thread.join(5)


class TestClient(WireErrorMixin, unittest.TestCase):
    def test_logged_predict_and_feedback(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                iid = 0xfeedface12345678
                res = c.predict("ctr", [1], [[2], [3], [4]], impression_id=iid)
                self.assertEqual(len(res.scores), 3)
                c.predict("ctr", [1], [[2]])                      # not logged
                ack = c.feedback("ctr", [w.FeedbackEvent(iid, 2, 1.0),
                                         (iid, 0, 0.0, 0.25),
                                         (iid, 3, 1.0),           # out of range
                                         (77, 0, 1.0),            # never logged
                                         (iid, 2, 1.0)])          # again
                self.assertEqual(ack.accepted, 2)
                self.assertEqual(ack.refused, [
                    w.Refused(2, w.Refusal.ITEM_OUT_OF_RANGE),
                    w.Refused(3, w.Refusal.UNKNOWN_IMPRESSION),
                    w.Refused(4, w.Refusal.DUPLICATE)])
                ack = c.feedback("ctr2", [(iid, 1, 1.0)])
                self.assertEqual(ack, w.FeedbackAck(0, [w.Refused(0, w.Refusal.WRONG_MODEL)]))
                # the encoder refuses before sending: nothing goes out
                with self.assertRaises(w.MalformedError):
                    c.feedback("ctr", [(0, 0, 1.0)])
                with self.assertRaises(w.MalformedError):
                    c.feedback("ctr", [(iid, 0, 1.0, 2e6)])
                with self.assertRaises(w.MalformedError):
                    c.send_train("ctr", [], [(1.0, [1])], weights=[-1.0])
        finally:
            srv.close()
        h0, p0 = srv.received[0]
        self.assertEqual((h0.type, h0.flags), (w.MsgType.PREDICT, w.PREDICT_FLAG_LOG))
        self.assertEqual(struct.unpack_from("<Q", p0)[0], 0xfeedface12345678)
        # after the impression id, the payload is the plain PREDICT's
        self.assertEqual(p0[8:], w.encode_predict("ctr", [1], [[2], [3], [4]]))
        self.assertEqual(srv.received[1][0].flags, 0)
        self.assertEqual([h.type for h, _ in srv.received], [1, 1, 10, 10])


    def test_predict_and_ping(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                res = c.predict("ctr", [1, 2], [[3], [4], [5]])
                self.assertEqual(res, w.PredictResult(3, [0.5, 0.5, 0.5]))
                self.assertEqual(c.ping(b"hello"), b"hello")
                self.assertEqual(c.predict("ctr", [], [[]], request_id=0).version, 3)
                with self.assertRaises(w.ServerError) as cm:
                    c.predict("nope", [], [[1]], request_id=77)
                self.assertEqual((cm.exception.code, cm.exception.request_id),
                                 (E.UNKNOWN_MODEL, 77))
                f = c.wait_for(c.send_frame(42, b"??"))
                self.assertEqual(w.decode_error(f.payload).code, E.UNKNOWN_TYPE)
        finally:
            srv.close()
        self.assertEqual([h.type for h, _ in srv.received], [1, 8, 1, 1, 42])
        self.assertEqual(srv.received[2][0].request_id, 0)

    def test_pipelining(self):
        srv = FakeServer(batch=3)
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                ids = [c.send_predict("ctr", [], [[1]] * k) for k in (1, 2, 3)]
                self.assertEqual(len(set(ids)), 3)
                # answers come back in reverse order; ask in send order
                for k, rid in zip((1, 2, 3), ids):
                    self.assertEqual(len(c.recv_predict_result(rid).scores), k)
                a = c.send_predict("ctr", [], [[1]])
                b = c.send_predict("ctr", [], [[1], [2]])
                d = c.send_predict("ctr", [], [[1], [2], [3], [4]])
                first = c.recv_frame()
                self.assertEqual(first.request_id, d)
                self.assertEqual(len(c.recv_predict_result(a).scores), 1)
                self.assertEqual(len(c.recv_predict_result(b).scores), 2)
        finally:
            srv.close()

    def test_send_raw_garbage(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                f = c.recv_frame()
                self.assertEqual((f.type, f.request_id), (w.MsgType.ERROR, 0))
                self.assertEqual(w.decode_error(f.payload).code, E.BAD_MAGIC)
                self.assertRaises(w.ConnectionClosed, c.recv_frame)
        finally:
            srv.close()

    def test_framing_error_while_waiting(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                c.send_raw(w.pack_header(w.MsgType.PING, 5, 0, reserved=1))
                with self.assertRaises(w.ServerError) as cm:
                    c.wait_for(5)
                self.assertEqual((cm.exception.code, cm.exception.request_id), (E.BAD_HEADER, 0))
        finally:
            srv.close()

    def test_error_families(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                with self.assertRaises(w.ModelNotFoundError) as cm:
                    c.predict("nope", [], [[1]], request_id=9)
                e = cm.exception
                self.assertIsInstance(e, w.ServerError)
                self.assertEqual((e.code, e.name, e.request_id), (E.UNKNOWN_MODEL,
                                                                  "UNKNOWN_MODEL", 9))
                # the encoder's refusals are the same family classes, raised before sending
                self.assertRaises(w.MalformedError, c.predict, "ctr", [], [])
                self.assertEqual(c.ping(b"ok"), b"ok")
        finally:
            srv.close()
        for code in E:
            fam = type(w.WireError(code, "m"))
            self.assertIn(fam, (w.FramingError, w.MalformedError, w.ModelNotFoundError,
                                w.UnavailableError, w.InternalError), code)
            srv_err = w.ServerError(code, "m", 3)
            self.assertIsInstance(srv_err, fam)
            self.assertEqual((srv_err.code, srv_err.message, srv_err.request_id), (code, "m", 3))
        self.assertIs(type(w.WireError(E.OVERLOADED, "")), w.UnavailableError)
        self.assertIs(type(w.WireError(E.BAD_MAGIC, "")), w.FramingError)
        self.assertIs(type(w.WireError(999, "")), w.WireError)
        self.assertIs(type(w.ServerError(999, "", 1)), w.ServerError)
        self.assertTrue(issubclass(w.Timeout, TimeoutError))
        self.assertTrue(issubclass(w.ConnectionClosed, ConnectionError))

    def test_timeout_keeps_the_request(self):
        srv = FakeServer(batch=2)       # answers only once two requests are in
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                a = c.send_predict("ctr", [], [[1]])
                self.assertRaises(w.Timeout, c.recv_predict_result, a, timeout=0.2)
                b = c.send_predict("ctr", [], [[1], [2]])
                self.assertEqual(len(c.recv_predict_result(a).scores), 1)
                self.assertEqual(len(c.recv_predict_result(b).scores), 2)
        finally:
            srv.close()

    def test_send_timeout_closes(self):
        lsock = socket.create_server(("127.0.0.1", 0))   # accepts nothing, reads nothing
        try:
            c = w.Client("127.0.0.1", lsock.getsockname()[1], timeout=0.3)
            with self.assertRaises(w.Timeout):
                c.send_raw(bytes(64 << 20))               # more than the socket buffers hold
            self.assertIsNone(c.sock, "a half-written frame closes the connection")
            self.assertRaises(w.ConnectionClosed, c.ping)
        finally:
            lsock.close()

    def test_predict_many(self):
        srv = FakeServer(batch=2)
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                # (the fake answers in pairs, in reverse: every batch here sends an even count)
                reqs = [([k], [[1]] * k) for k in range(1, 9)]
                res = c.predict_many("ctr", reqs, window=3)
                self.assertEqual([len(r.scores) for r in res], list(range(1, 9)))
                # a request the encoder refuses takes its place in the list, or is raised
                reqs = [([], [[1]]), ([], []), ([], [[1], [2]]), ([], [[3]]), ([], [[4]] * 3)]
                res = c.predict_many("ctr", reqs, window=2, return_exceptions=True)
                self.assertEqual(len(res[0].scores), 1)
                self.assertIsInstance(res[1], w.MalformedError)
                self.assertEqual(res[1].code, E.NO_ITEMS)
                self.assertEqual([len(r.scores) for r in res[2:]], [2, 1, 3])
                self.assertEqual(c.in_flight(), 0)
                # without return_exceptions a refusal stops the sending, as a server error
                # does: the two requests in flight are drained, the one after is not sent
                before = len(srv.received)
                with self.assertRaises(w.MalformedError):
                    c.predict_many("ctr", [reqs[0], reqs[2], reqs[1], reqs[3]], window=2)
                self.assertEqual(c.in_flight(), 0)
                self.assertEqual(c.ping(b"still in step"), b"still in step")
        finally:
            srv.close()
        self.assertEqual([h.type for h, _ in srv.received[before:]], [1, 1, 8])

    def test_predict_many_server_error_drains(self):
        srv = FakeServer(batch=1)
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                with self.assertRaises(w.ModelNotFoundError) as cm:
                    c.predict_many("nope", [([], [[1]])] * 10, window=4)
                self.assertEqual(cm.exception.request_id, 1)
                self.assertEqual(c.in_flight(), 0)
                self.assertEqual(c.ping(b"p"), b"p")
        finally:
            srv.close()
        self.assertEqual([h.type for h, _ in srv.received], [1] * 4 + [8])


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
