// SPDX-License-Identifier: MIT
#include "mori/collectives/dtype.h"

#include "mori/core/status.h"

namespace mori::collectives {

DataType check_dtype(int t, const char* caller) {
  const DataType d = mori::check_dtype(t, caller);
  if (static_cast<int>(d) > static_cast<int>(DataType::kComplex128))
    raise(Status::kInvalidArgument, "%s: mori.ccl does not support %s elements", caller, dtype_name(d));
  return d;
}

ReduceOp check_reduce(DataType t, int op, const char* caller) {
  if (op < 0 || op > static_cast<int>(ReduceOp::kMin))
    raise(Status::kInvalidArgument, "%s: unknown reduce op code %d (sum=0, max=1, min=2)", caller, op);
  return mori::check_reduce(t, op, caller);
}

}  // namespace mori::collectives
