// Is one KV format better than another on the same text? The mean of the per-position
// differences of a measure (e.g. KL divergence to BF16), with a standard error from the means
// of consecutive blocks: neighbouring positions of a text are correlated, so the error of
// independent samples would be too small and call noise a difference.
#pragma once
#include <cstdint>
#include <span>

namespace oscar {

struct PairedDifference {
  double mean = 0;            // mean of a[i] − b[i]
  double standard_error = 0;  // of that mean, from the block means (infinite with fewer than 2 blocks)
  int64_t blocks = 0;
  // |mean| beyond z standard errors.
  bool significant(double z) const;
};

// a and b: one value per position, same positions; block: positions per block (n / block
// blocks, the remainder spread over them; one block when n < block). Throws oscar::Error for
// mismatched or empty inputs, or block < 1.
PairedDifference paired_difference(std::span<const double> a, std::span<const double> b, int64_t block);

}  // namespace oscar
