// Python's random.Random, bit for bit (the simulated workers' noise).

#pragma once

#include "common.hpp"

namespace cwsim {

// Python's random.Random: MT19937 seeded by init_by_array, random() from two draws, gauss by
// Box-Muller with its cached second value, so that noisy runs match the Python simulator.
struct PyRandom {
  uint32_t mt[624];
  int mti = 625;
  bool has_next = false;
  double gauss_next = 0;

  void init_genrand(uint32_t s) {
    mt[0] = s;
    for (mti = 1; mti < 624; mti++)
      mt[mti] = 1812433253U * (mt[mti - 1] ^ (mt[mti - 1] >> 30)) + (uint32_t)mti;
  }
  // random.seed(n) for an int n: init_by_array over abs(n)'s 32-bit words, least first
  void seed(const std::vector<uint32_t>& key) {
    int len = (int)key.size();
    init_genrand(19650218U);
    int i = 1, j = 0;
    for (int k = std::max(624, len); k; k--) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] + (uint32_t)j;
      i++; j++;
      if (i >= 624) { mt[0] = mt[623]; i = 1; }
      if (j >= len) j = 0;
    }
    for (int k = 623; k; k--) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - (uint32_t)i;
      i++;
      if (i >= 624) { mt[0] = mt[623]; i = 1; }
    }
    mt[0] = 0x80000000U;
    mti = 624;
    has_next = false;
  }
  uint32_t next32() {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t y;
    if (mti >= 624) {
      int kk;
      for (kk = 0; kk < 624 - 397; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 0x1U];
      }
      for (; kk < 623; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 0x1U];
      }
      y = (mt[623] & 0x80000000U) | (mt[0] & 0x7fffffffU);
      mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 0x1U];
      mti = 0;
    }
    y = mt[mti++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
  }
  double random() {
    uint32_t a = next32() >> 5, b = next32() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }
  double gauss(double sigma) {
    double z;
    if (has_next) {
      z = gauss_next;
      has_next = false;
    } else {
      double x2pi = random() * 2.0 * M_PI;
      double g2rad = std::sqrt(-2.0 * std::log(1.0 - random()));
      z = std::cos(x2pi) * g2rad;
      gauss_next = std::sin(x2pi) * g2rad;
      has_next = true;
    }
    return 0.0 + z * sigma;
  }
};

}  // namespace cwsim
