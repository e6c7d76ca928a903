// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator behind tessera's stochastic rounding. Host and device share this one
// definition, so CPU and CUDA draw the same bits. Checked against the Random123 known-answer
// vectors in tests/quantize/test_quantize_rules.cpp.
//
// Stream of a quantized copy: key = (lo32(seed), hi32(seed)); element e of the stream uses word
// e % 4 of the block with counter (lo32(e/4), hi32(e/4), lo32(offset), hi32(offset)).
#pragma once

#include <cstdint>

#include "tessera/core/macros.h"

namespace tessera::philox {

inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;

struct Block {
  uint32_t w[4];
};

// One round on the counter words (w0, w1, w2, w3) with the round's key (k0, k1).
TESSERA_HD void philox_round(uint32_t& w0, uint32_t& w1, uint32_t& w2, uint32_t& w3, uint32_t k0,
                             uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kMul0) * w0;
  const uint64_t p1 = static_cast<uint64_t>(kMul1) * w2;
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  w0 = hi1 ^ w1 ^ k0;
  w1 = lo1;
  w2 = hi0 ^ w3 ^ k1;
  w3 = lo0;
}

// Ten rounds; the key is bumped by the Weyl constants between rounds.
TESSERA_HD Block philox4x32_10(Block ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    philox_round(ctr.w[0], ctr.w[1], ctr.w[2], ctr.w[3], k0, k1);
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return ctr;
}

// Block g of the stream (seed, offset): the random bits of its elements 4g .. 4g + 3.
TESSERA_HD Block stream_block(uint64_t seed, uint64_t offset, uint64_t g) {
  return philox4x32_10(Block{{static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32),
                              static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// The 32 random bits of element `e` of the stream (seed, offset).
TESSERA_HD uint32_t random_bits(uint64_t seed, uint64_t offset, uint64_t e) {
  return stream_block(seed, offset, e >> 2).w[e & 3];
}

}  // namespace tessera::philox
