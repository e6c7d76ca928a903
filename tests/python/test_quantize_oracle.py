"""An independent NumPy + ml_dtypes statement of docs/numerics.md (written from the spec, not from the
C++): the oracle that tessera's reference quantizer is compared with in test_quantize.py.

All arithmetic is float32 (np.float32 scalars and arrays); summation orders that matter (the
Hadamard transform) are written as explicit sequential loops.
"""
import ml_dtypes
import numpy as np

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
E4M3, E5M2, E2M1 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn
FP8_MAX = {"e4m3": F32(448.0), "e5m2": F32(57344.0)}
EMAX_ELEM = {"e4m3": 8, "e5m2": 15}


def ceil_div(a, b):
    return -(-a // b)


def round_up(a, b):
    return ceil_div(a, b) * b


def fp8_codes(v, element):
    """Saturating RNE cast; NaN gives the positive NaN code 0x7f."""
    v = np.asarray(v, dtype=F32)
    m = FP8_MAX[element]
    with np.errstate(invalid="ignore"):
        clipped = np.clip(v, -m, m)
    codes = clipped.astype(E4M3 if element == "e4m3" else E5M2).view(np.uint8).copy()
    codes[np.isnan(v)] = 0x7F
    return codes


def fp8_values(codes, element):
    return codes.view(E4M3 if element == "e4m3" else E5M2).astype(F32)


def amax_of(a, axis=None):
    """max |a| (NaN if any NaN), float32."""
    return np.max(np.abs(a.astype(F32)), axis=axis, initial=F32(0.0))


def current_scale(amax, element, eps=0.0, pow2=False):
    amax = F32(amax)
    if not np.isfinite(amax):  # non-finite input in the scaling unit: NaN scale
        return F32(np.nan)
    a = max(amax, F32(eps))
    if a == 0:
        return F32(1.0)
    with np.errstate(over="ignore"):
        s = F32(FP8_MAX[element] / a)
    if np.isinf(s):
        s = FLT_MAX
    if pow2:
        s = F32(np.ldexp(1.0, int(np.frexp(np.float64(s))[1]) - 1))  # largest 2^k <= s
    return F32(s)


def pad2(a, rows, cols):
    out = np.zeros((rows, cols), dtype=a.dtype)
    out[: a.shape[0], : a.shape[1]] = a
    return out


def swizzle(scales):
    """128x4 tiles, tile-major, entry (r, c) of a tile at (r%32)*16 + (r/32)*4 + c."""
    rows, cols = scales.shape
    pr, pc = round_up(rows, 128), round_up(cols, 4)
    padded = pad2(scales, pr, pc)
    # (tile_r, r32, r4-block, tile_c, c) → tile-major, then (r%32, r/32, c).
    t = padded.reshape(pr // 128, 4, 32, pc // 4, 4)          # (tr, r/32, r%32, tc, c)
    t = t.transpose(0, 3, 2, 1, 4)                             # (tr, tc, r%32, r/32, c)
    return t.reshape(pr, pc)


# ---- FP8 with FP32 scales ------------------------------------------------------------------

def quantize_tensor(x, element, eps=0.0, pow2=False):
    amax = amax_of(x)
    s = current_scale(amax, element, eps, pow2)
    return fp8_codes(x * s, element), np.array([[F32(1.0) / s]], dtype=F32), amax


def quantize_rowwise(x, element):
    amax = amax_of(x, axis=1)
    scales = np.array([current_scale(a, element) for a in amax], dtype=F32)
    codes = fp8_codes(x * scales[:, None], element)
    return codes, (F32(1.0) / scales)[:, None]


def quantize_block(x, element, tile, pow2=True):
    """tile False: 1x128 blocks; True: 128x128 tiles. Returns codes, padded FP32 scale_inv."""
    m, k = x.shape
    bh = 128 if tile else 1
    nbr, nbc = ceil_div(m, bh), ceil_div(k, 128)
    xp = pad2(x.astype(F32), nbr * bh, nbc * 128)
    blocks = xp.reshape(nbr, bh, nbc, 128)
    amax = np.max(np.abs(blocks), axis=(1, 3))                 # (nbr, nbc)
    scale = np.array([[current_scale(a, element, 0.0, pow2) for a in row] for row in amax], dtype=F32)
    full = np.repeat(np.repeat(scale, bh, axis=0), 128, axis=1)[:m, :k]
    codes = fp8_codes(x * full, element)
    sinv = F32(1.0) / scale
    if tile:
        return codes, pad2(sinv, nbr, round_up(nbc, 4))
    return codes, pad2(sinv, round_up(m, 4), nbc)


# ---- MXFP8 -----------------------------------------------------------------------------------

def e8m0_round_up(amax, element):
    v = F32(amax) * (F32(1.0) / FP8_MAX[element])
    if not np.isfinite(v):  # NaN or inf in the block: the NaN scale
        return 0xFF
    if v == 0:
        return 0
    mant, e = np.frexp(np.float64(v))      # v = mant * 2^e, mant in [0.5, 1)
    ceil_log2 = e - 1 if mant == 0.5 else e   # smallest power of two >= v
    return int(min(max(ceil_log2 + 127, 0), 254))


def e8m0_floor(amax, element):
    amax = F32(amax)
    if not np.isfinite(amax):  # NaN or inf in the block: the NaN scale
        return 0xFF
    if amax == 0:
        return 0
    e = int(np.frexp(np.float64(amax))[1]) - 1 - EMAX_ELEM[element]
    return min(max(e, -127), 127) + 127


def quantize_mxfp8_rows(x, element, rounding, tile=False):
    """1x32 blocks (or 32x32 tiles) along rows: codes (M, K), E8M0 (M, ceil(K/32))."""
    m, k = x.shape
    nb = ceil_div(k, 32)
    bh = 32 if tile else 1
    nbr = ceil_div(m, bh)
    xp = pad2(x.astype(F32), nbr * bh, nb * 32)
    amax = np.max(np.abs(xp.reshape(nbr, bh, nb, 32)), axis=(1, 3))
    rule = e8m0_round_up if rounding == "round_up" else e8m0_floor
    exps = np.array([[rule(a, element) for a in row] for row in amax], dtype=np.int64)
    exps_full = np.repeat(exps, bh, axis=0)[:m]
    mult = np.where(exps_full == 255, F32(np.nan),
                    np.ldexp(F32(1.0), (127 - exps_full).astype(np.int32)).astype(F32))
    codes = fp8_codes(x * np.repeat(mult, 32, axis=1)[:, :k], element)
    return codes, exps_full.astype(np.uint8)


def quantize_mxfp8(x, element, rounding, columnwise, tile, layout):
    if not columnwise:
        codes, s = quantize_mxfp8_rows(x, element, rounding, tile)
        return codes, swizzle(s) if layout == "swizzled" else s
    codes_t, s_t = quantize_mxfp8_rows(x.T.copy(), element, rounding, tile)   # (K, ceil(M/32))
    return codes_t.T.copy(), swizzle(s_t) if layout == "swizzled" else s_t.T.copy()


# ---- NVFP4 -----------------------------------------------------------------------------------

SIGNS = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], dtype=F32)
H16 = np.array([[1.0]], dtype=F32)
for _ in range(4):
    H16 = np.block([[H16, H16], [H16, -H16]]).astype(F32)


def hadamard_rows(a):
    """t[i] = (sum_j (H[i,j] s[j]) b[j], j ascending from 0) * 0.25 for each 16-block of a row."""
    r, c = a.shape
    b = a.reshape(r, c // 16, 16).astype(F32)
    coef = (H16 * SIGNS[None, :]).astype(F32)
    out = np.empty_like(b)
    for i in range(16):
        acc = np.zeros(b.shape[:2], dtype=F32)
        for j in range(16):
            acc = (acc + coef[i, j] * b[:, :, j]).astype(F32)
        out[:, :, i] = acc * F32(0.25)
    return out.reshape(r, c)


def philox(ctr, key):
    """Philox4x32-10 on arrays of counters ctr (4, n) uint64-held uint32 and key (2,)."""
    c = [np.asarray(w, dtype=np.uint64) for w in ctr]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [((p1 >> np.uint64(32)) ^ c[1] ^ k0) & mask, p1 & mask,
             ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & mask, p0 & mask]
        k0 = (k0 + np.uint64(0x9E3779B9)) & mask
        k1 = (k1 + np.uint64(0xBB67AE85)) & mask
    return c


def random_words(seed, offset, e):
    e = np.asarray(e, dtype=np.uint64)
    g = e // np.uint64(4)
    m = np.uint64(0xFFFFFFFF)
    out = philox([g & m, g >> np.uint64(32), np.full_like(g, offset & 0xFFFFFFFF),
                  np.full_like(g, offset >> 32)], (seed & 0xFFFFFFFF, seed >> 32))
    words = np.stack(out)                      # (4, n)
    return words[(e % np.uint64(4)).astype(np.int64), np.arange(e.size)].astype(np.uint32)


GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1_codes(v, sr_words=None):
    v = np.asarray(v, dtype=F32)
    if sr_words is None:
        codes = v.astype(E2M1).view(np.uint8) & 0xF
    else:
        a = np.abs(v.astype(np.float64))
        lo = np.clip(np.searchsorted(GRID, a, side="right") - 1, 0, 7)
        hi = np.minimum(lo + 1, 7)
        step = GRID[hi] - GRID[lo]
        frac = np.where(step > 0, (a - GRID[lo]) / np.where(step > 0, step, 1), 0)
        u = (sr_words >> 8).astype(np.float64) / 2.0 ** 24
        codes = np.where(frac > u, hi, lo).astype(np.uint8) | np.where(np.signbit(v), 8, 0).astype(np.uint8)
    codes = np.where(np.isnan(v), 0x7, codes).astype(np.uint8)
    return codes


def quantize_nvfp4_copy(a, tile=False, rht=False, sr=None, stream_base=0):
    """a: the copy (R, C). Returns packed codes, E4M3 scale bytes (R, ceil(C/16)), global amax."""
    a = a.astype(F32)
    if rht:
        a = hadamard_rows(a)
    r, c = a.shape
    g = amax_of(a)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s_enc = F32(F32(2688.0) / g)
    if np.isnan(s_enc) or np.isinf(s_enc):
        s_enc = FLT_MAX
    if g == 0 or s_enc == 0:
        s_enc = F32(1.0)
    if not np.isfinite(g):  # non-finite input: E2M1 holds none, the whole copy's scale is NaN
        s_enc = F32(np.nan)
    nb = ceil_div(c, 16)
    bh = 16 if tile else 1
    nbr = ceil_div(r, bh)
    blocks = pad2(a, nbr * bh, nb * 16).reshape(nbr, bh, nb, 16)
    bamax = np.max(np.abs(blocks), axis=(1, 3)).astype(F32)           # (nbr, nb)
    sb_val = (bamax * F32(s_enc * (F32(1.0) / F32(6.0)))).astype(F32)
    sb = fp8_codes(sb_val, "e4m3")
    sb[np.isnan(sb_val)] = 0x7F
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dec = (fp8_values(sb, "e4m3") * (F32(1.0) / s_enc)).astype(F32)
        enc = (F32(1.0) / dec).astype(F32)
    enc = np.where(np.isnan(enc) | np.isinf(enc), FLT_MAX, enc).astype(F32)
    enc_full = np.repeat(np.repeat(enc, bh, axis=0), 16, axis=1)[:r, :c]
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.clip((a * enc_full).astype(F32), F32(-6.0), F32(6.0))
    words = None
    if sr is not None:
        seed, offset = sr
        words = random_words(seed, offset, stream_base + np.arange(r * c, dtype=np.uint64)).reshape(r, c)
    codes = e2m1_codes(v, words)
    if c % 2:
        codes = np.concatenate([codes, np.zeros((r, 1), np.uint8)], axis=1)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = np.repeat(sb, bh, axis=0)[:r]
    return packed, scales, g


def quantize_nvfp4(x, columnwise, tile, rht, sr, layout):
    m, k = x.shape
    if columnwise:
        packed, scales, g = quantize_nvfp4_copy(x.T.copy(), tile, rht, sr, m * k)
    else:
        packed, scales, g = quantize_nvfp4_copy(x, tile, False, sr, 0)
    return packed, swizzle(scales) if layout == "swizzled" else scales, g


# ---- self-checks of the oracle's building blocks --------------------------------------------

def test_philox_known_answers():
    """Random123 kat_vectors for philox4x32-10."""
    out = philox([[0], [0], [0], [0]], (0, 0))
    assert [int(w[0]) for w in out] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    out = philox([[0x243F6A88], [0x85A308D3], [0x13198A2E], [0x03707344]], (0xA4093822, 0x299F31D0))
    assert [int(w[0]) for w in out] == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_swizzle_formula():
    s = np.arange(200 * 6, dtype=np.int64).reshape(200, 6)
    z = swizzle(s).reshape(-1)
    for r, c in [(0, 0), (1, 0), (31, 3), (32, 0), (127, 5), (128, 0), (199, 5)]:
        tile = (r // 128) * 2 + c // 4
        rr = r % 128
        assert z[tile * 512 + (rr % 32) * 16 + (rr // 32) * 4 + c % 4] == s[r, c]


def test_e2m1_grid_rounding():
    v = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, -0.0], np.float32)
    got = GRID[e2m1_codes(v) & 7] * np.where(e2m1_codes(v) & 8, -1, 1)
    assert list(got) == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 0.0]
