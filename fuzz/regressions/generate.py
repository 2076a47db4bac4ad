#!/usr/bin/env python3
"""Writes the crafted reproducers in fuzz/regressions/<target>/.

They are too large (or too structured) for libFuzzer to reach from the seed
corpus with its default -max_len, so they were built by hand from reading the
parsers, then confirmed with the fuzz targets (see README.md).

usage: fuzz/regressions/generate.py [OUT]   (OUT defaults to fuzz/regressions)
"""
import hashlib
import os
import struct
import sys
import zlib

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), 'wb') as f:
        f.write(data)


def offload_binary_shared_strings(size):
    """An offload binary v2 whose e entries all name the same string map of s
    records (all pointing at one string "a"): parse() builds e vectors of s
    pairs, e*s*32 bytes, quadratic in the input size."""
    e, s = size // 80, size // 48
    strings = 32 + 40 * e
    text = strings + 24 * s
    total = (text + 2 + 7) // 8 * 8
    data = bytearray(b'\x10\xff\x10\xad') + struct.pack('<IQQQ', 2, total, 32, e)
    for _ in range(e):
        # image kind 1 (object), offload kind 4 (HIP), flags, strings, count, empty image
        data += struct.pack('<HHIQQQQ', 1, 4, 0, strings, s, 0, 0)
    for _ in range(s):
        data += struct.pack('<QQQ', text, text, 1)
    data += b'a\0'
    return bytes(data + b'\0' * (total - len(data)))


def ascii_count(n):
    """The smallest count >= n whose bytes are all < 0x80 (valid UTF-8)."""
    while any(b >= 0x80 for b in struct.pack('<Q', n)):
        n += 1
    return n


def nested_bundles(size):
    """K bundle tables nested in one another: every entry ID is itself a bundle
    header whose count asks for one entry more than follows. Every bundle
    fails as truncated, scan() resumes one byte later at the next nested
    magic and reads all the following entries again: K*K/2 entry reads."""
    magic = b'__CLANG_OFFLOAD_BUNDLE__'
    k = (size - 32) // 56
    data = bytearray(magic + struct.pack('<Q', ascii_count(k + 1)))
    for j in range(k):
        data += struct.pack('<QQQ', 0, 0, 32) + magic + struct.pack('<Q', ascii_count(k - j))
    return bytes(data)


def ccob_zstd_2gib_window():
    """A 42-byte CCOB v3 (zstd) whose frame declares a 2 GiB window and no
    content size: the decoder (window_log_max 31) mallocs 2 GiB up front for a
    bundle that promises 1 byte."""
    frame = bytes([0x28, 0xB5, 0x2F, 0xFD,  # zstd magic
                   0x00,                    # no content size, not single-segment
                   0xA8,                    # window descriptor: 2^(10+21) bytes
                   0x09, 0x00, 0x00]) + b'A'  # last block, raw, 1 byte
    return b'CCOB' + struct.pack('<HHQQQ', 3, 1, 32 + len(frame), 1, 0) + frame


def nv_fatbin_many_entries(size):
    """An NVIDIA fat binary of empty 64-byte cubin entries (sm_80): listing is
    linear, but Container::image_bytes re-parses the whole fat binary for
    each image, so extracting every image is quadratic."""
    n = (size - 16) // 64
    entry = struct.pack('<HHIQIIHHIIIQQQ', 2, 0x0101, 64, 0, 0, 0, 0, 0, 80, 0, 0, 1, 0, 0)
    return struct.pack('<IHHQ', 0xBA55ED50, 1, 16, n * 64) + entry * n


def ccob_empty_table(size):
    """A CCOB v3 (zlib) holding a bundle of `size` bytes that is nothing but a
    table of empty entries (24 zero bytes each). Under Limits::default() (4 GiB)
    listing it (Container::parse) keeps a BundleEntry and an Image per entry:
    about 16 bytes of memory per uncompressed byte, from a 1000x smaller input.
    Not a fuzz-target input: the targets cap inflation at 1 MiB."""
    head = b'__CLANG_OFFLOAD_BUNDLE__' + struct.pack('<Q', (size - 32) // 24)
    co, md5 = zlib.compressobj(9), hashlib.md5(head)
    payload, left, chunk = co.compress(head), size - len(head), b'\0' * (1 << 20)
    while left > 0:
        c = chunk[:min(left, len(chunk))]
        payload += co.compress(c)
        md5.update(c)
        left -= len(c)
    payload += co.flush()
    h = struct.unpack('<Q', md5.digest()[:8])[0]
    return b'CCOB' + struct.pack('<HHQQQ', 3, 0, 32 + len(payload), size, h) + payload


put('offload_binary', 'oom-shared-string-map', offload_binary_shared_strings(384 << 10))
put('container_scan', 'oom-offload-binary-shared-string-map', offload_binary_shared_strings(384 << 10))
put('container_scan', 'timeout-nested-bundles', nested_bundles(1 << 20))
put('container_scan', 'timeout-nv-fatbin-image-bytes', nv_fatbin_many_entries(512 << 10))
put('default-limits', 'ccob-empty-table-64mib', ccob_empty_table(64 << 20))
put('compressed_bundle', 'asan-oom-zstd-2gib-window', ccob_zstd_2gib_window())
