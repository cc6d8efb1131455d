// cw's convolutions as CUTLASS implicit GEMMs, called by the Relax VM through the TVM FFI.
//
// One function, `cw_cutlass_conv2d_v1(x, w, params, y, workspace)`: x NHWC, w KRSC (OHWI), y
// NPQK, all fp32 and contiguous; params = [config, split_k, pad_top, pad_left, stride_h,
// stride_w, dilation_h, dilation_w]; workspace int32, CUTLASS's split-K semaphores, planned by
// the graph so that nothing is allocated per call. `config` picks one of the tile shapes below
// and `split_k` the number of slices of the reduction; both are chosen at compile time by
// cw/compile/cutlass_conv.py (plan), which must list the same tile shapes.
//
// `cw_cutlass_conv2d_bias_v1(x, w, bias, params, y, workspace)` is the same convolution with
// its epilogue: y = conv + bias (one value per output channel), then ReLU when params has a
// ninth entry of 1, in CUTLASS's epilogue instead of a pass of their own over y. The bias is read
// as a C operand whose strides are all 0; with serial split-K the first slice adds it and only
// the last applies ReLU (ReluInLastSlice below: CUTLASS's LinearCombinationRelu gets this wrong).
//
// `cw_cutlass_conv2d_residual_v1(x, w, bias, residual, params, y, workspace)` adds a residual
// too: y = conv + bias + residual (residual NPQK like y), then ReLU when params[8] is 1: a
// residual network's block ending, CUTLASS's LinearCombinationResidualBlock on the
// with-broadcast kernel. The residual is the C operand and the bias the broadcast vector; with
// serial split-K the first slice adds the residual, later slices read the partial sum from y,
// and only the last adds the bias and applies ReLU (ImplicitGemmConvolutionWithFusedEpilogue).
//
// Products are 3xTF32 (CUTLASS's OpMultiplyAddFastF32): each fp32 operand is split into a
// TF32 high part and a TF32 remainder, and three tensor-core products recover fp32 accuracy,
// with fp32 accumulation. Built with -DCW_CONV_TF32 the object exports
// `cw_cutlass_conv2d_tf32_v1`, `..._bias_tf32_v1` and `..._residual_tf32_v1` instead (same arguments):
// one TF32 product per fp32 product (operands rounded to 10 bits of mantissa, fp32 sums), for
// `cw compile --precision tf32`.
//
// Built with -DCW_CONV_REFERENCE (by g++, no CUDA), the same checks and ABI run plain loops on
// the host, and all six functions are exported; the TF32 ones round their operands as the
// tensor cores do. The tests use it to check the graph rewrite, the calling convention and TF32's
// accuracy on a CPU.

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#ifndef CW_CONV_REFERENCE
#include <cuda_runtime.h>
#include <tvm/ffi/extra/c_env_api.h>

// order matters: the device adapter uses helpers the kernel headers declare
#include "cutlass/cutlass.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/conv/kernel/default_conv2d_fprop_with_broadcast.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/epilogue/thread/linear_combination_residual_block.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/functional.h"
#endif

namespace {

using tvm::ffi::Shape;
using tvm::ffi::TensorView;

constexpr int kAlignment = 4;  // fp32 elements per 16-byte access: C and K must be multiples

struct Problem {
  int n, h, w, c, k, r, s, p, q;
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  int config, split_k;
  const float* bias = nullptr;  // one per output channel, or none
  const float* residual = nullptr;  // shaped like y, or none
  bool relu = false;
};

// what follows the products in the same kernel
enum class Epilogue { kNone, kBias, kBiasRelu, kResidual, kResidualRelu };

constexpr bool has_residual(Epilogue e) {
  return e == Epilogue::kResidual || e == Epilogue::kResidualRelu;
}

void check_tensor(const TensorView& t, const char* name, int dtype_code) {
  if (t.ndim() != 4 && !(dtype_code == kDLInt && t.ndim() == 1)) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: " << name << " has " << t.ndim()
                              << " dimensions";
  }
  if (t.dtype().code != dtype_code || t.dtype().bits != 32 || t.dtype().lanes != 1) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: " << name << " must be "
                              << (dtype_code == kDLFloat ? "float32" : "int32");
  }
  if (!t.IsContiguous()) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: " << name << " is not contiguous";
  }
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: " << name << " is not 16-byte aligned";
  }
}

Problem read_problem(const TensorView& x, const TensorView& w, const Shape& params,
                     const TensorView& y, const TensorView& workspace,
                     const TensorView* bias = nullptr, const TensorView* residual = nullptr) {
  check_tensor(x, "x", kDLFloat);
  check_tensor(w, "w", kDLFloat);
  check_tensor(y, "y", kDLFloat);
  check_tensor(workspace, "workspace", kDLInt);
  const size_t expected = bias ? 9 : 8;  // with a bias: whether ReLU follows
  if (params.size() != expected) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: expected " << expected
                              << " parameters, got " << params.size();
  }
  Problem pb;
  pb.n = static_cast<int>(x.size(0));
  pb.h = static_cast<int>(x.size(1));
  pb.w = static_cast<int>(x.size(2));
  pb.c = static_cast<int>(x.size(3));
  pb.k = static_cast<int>(w.size(0));
  pb.r = static_cast<int>(w.size(1));
  pb.s = static_cast<int>(w.size(2));
  pb.p = static_cast<int>(y.size(1));
  pb.q = static_cast<int>(y.size(2));
  pb.config = static_cast<int>(params[0]);
  pb.split_k = static_cast<int>(params[1]);
  pb.pad_h = static_cast<int>(params[2]);
  pb.pad_w = static_cast<int>(params[3]);
  pb.stride_h = static_cast<int>(params[4]);
  pb.stride_w = static_cast<int>(params[5]);
  pb.dil_h = static_cast<int>(params[6]);
  pb.dil_w = static_cast<int>(params[7]);
  if (w.size(3) != pb.c || y.size(0) != pb.n || y.size(3) != pb.k) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: shapes disagree: x (" << pb.n << ", " << pb.h
                              << ", " << pb.w << ", " << pb.c << "), w (" << pb.k << ", " << pb.r
                              << ", " << pb.s << ", " << w.size(3) << "), y (" << y.size(0)
                              << ", " << pb.p << ", " << pb.q << ", " << y.size(3) << ")";
  }
  if (pb.c % kAlignment != 0 || pb.k % kAlignment != 0) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: channels (" << pb.c << " in, " << pb.k
                              << " out) must be multiples of " << kAlignment;
  }
  if (pb.split_k < 1 || pb.stride_h < 1 || pb.stride_w < 1 || pb.dil_h < 1 || pb.dil_w < 1) {
    TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: bad split, stride or dilation";
  }
  if (bias) {
    const TensorView& b = *bias;
    if (b.dtype().code != kDLFloat || b.dtype().bits != 32 || b.dtype().lanes != 1 ||
        !b.IsContiguous() || reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 != 0) {
      TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: bias must be contiguous, 16-byte "
                                   "aligned float32";
    }
    if (b.numel() != pb.k) {
      TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: bias has " << b.numel()
                                << " values for " << pb.k << " output channels";
    }
    pb.bias = static_cast<const float*>(b.data_ptr());
    pb.relu = params[8] != 0;
  }
  if (residual) {
    const TensorView& r = *residual;
    check_tensor(r, "residual", kDLFloat);
    for (int i = 0; i < 4; ++i) {
      if (r.size(i) != y.size(i)) {
        TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: residual (" << r.size(0) << ", "
                                  << r.size(1) << ", " << r.size(2) << ", " << r.size(3)
                                  << ") is not shaped like y (" << y.size(0) << ", "
                                  << y.size(1) << ", " << y.size(2) << ", " << y.size(3) << ")";
      }
    }
    pb.residual = static_cast<const float*>(r.data_ptr());
  }
  return pb;
}

#ifdef CW_CONV_REFERENCE

// fp32 to TF32 as CUTLASS converts operands on sm_90 (cvt.rn.tf32.f32: to nearest, ties to
// even; sm_80's ties away differs only on exact ties), kept in an fp32: 10 bits of mantissa
float to_tf32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) {  // NaN and infinities stay as they are
    bits = (bits + 0xfffu + ((bits >> 13) & 1u)) & 0xffffe000u;
  }
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::vector<float> operand(const TensorView& t, bool tf32) {
  const float* d = static_cast<const float*>(t.data_ptr());
  std::vector<float> out(d, d + t.numel());
  if (tf32) {
    for (float& v : out) v = to_tf32(v);
  }
  return out;
}

template <bool kTf32, Epilogue>  // the epilogue is read from pb here
void run(const Problem& pb, TensorView x, TensorView w, TensorView y, TensorView) {
  const std::vector<float> xv = operand(x, kTf32), wv = operand(w, kTf32);
  const float* xd = xv.data();
  const float* wd = wv.data();
  float* yd = static_cast<float*>(y.data_ptr());
  for (int n = 0; n < pb.n; ++n)
    for (int p = 0; p < pb.p; ++p)
      for (int q = 0; q < pb.q; ++q)
        for (int k = 0; k < pb.k; ++k) {
          float sum = 0.f;
          for (int r = 0; r < pb.r; ++r) {
            int h = p * pb.stride_h - pb.pad_h + r * pb.dil_h;
            if (h < 0 || h >= pb.h) continue;
            for (int s = 0; s < pb.s; ++s) {
              int wi = q * pb.stride_w - pb.pad_w + s * pb.dil_w;
              if (wi < 0 || wi >= pb.w) continue;
              const float* xp = xd + ((static_cast<int64_t>(n) * pb.h + h) * pb.w + wi) * pb.c;
              const float* wp = wd + ((static_cast<int64_t>(k) * pb.r + r) * pb.s + s) * pb.c;
              for (int c = 0; c < pb.c; ++c) sum += xp[c] * wp[c];
            }
          }
          const int64_t out = ((static_cast<int64_t>(n) * pb.p + p) * pb.q + q) * pb.k + k;
          if (pb.bias) sum += pb.bias[k];
          if (pb.residual) sum += pb.residual[out];
          if (pb.relu && sum < 0.f) sum = 0.f;
          yd[out] = sum;
        }
}

#else

// the arguments both kernel generators take: the plain one and the one with a broadcast vector
// (for the residual epilogue), which builds the plain one's mainloop and replaces its epilogue
#define CW_FPROP_ARGUMENTS                                                                     \
  float, cutlass::layout::TensorNHWC, float, cutlass::layout::TensorNHWC, float,               \
      cutlass::layout::TensorNHWC, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, \
      cutlass::gemm::GemmShape<TM, TN, TK>, cutlass::gemm::GemmShape<WM, WN, TK>,              \
      cutlass::gemm::GemmShape<16, 8, 8>, EpilogueOp,                                          \
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, Stages, MathOp,            \
      cutlass::conv::IteratorAlgorithm::kOptimized, cutlass::conv::StrideSupport::kStrided,    \
      kAlignment, kAlignment

template <bool kResidual, typename MathOp, typename EpilogueOp, int TM, int TN, int TK, int WM,
          int WN, int Stages>
struct FpropKernel {
  using type = typename cutlass::conv::kernel::DefaultConv2dFprop<CW_FPROP_ARGUMENTS>::Kernel;
};

template <typename MathOp, typename EpilogueOp, int TM, int TN, int TK, int WM, int WN,
          int Stages>
struct FpropKernel<true, MathOp, EpilogueOp, TM, TN, TK, WM, WN, Stages> {
  using type =
      typename cutlass::conv::kernel::DefaultConv2dFpropWithBroadcast<CW_FPROP_ARGUMENTS>::Kernel;
};

#undef CW_FPROP_ARGUMENTS

template <bool kResidual, typename MathOp, typename EpilogueOp, int TM, int TN, int TK, int WM,
          int WN, int Stages>
struct TileConfig {
  using Kernel =
      typename FpropKernel<kResidual, MathOp, EpilogueOp, TM, TN, TK, WM, WN, Stages>::type;
  using Op = cutlass::conv::device::ImplicitGemmConvolution<Kernel>;
};

// y = relu(conv + bias), safe with serial split-K: ReLU in the last slice only, earlier slices
// pass their partial sums on as they are. CUTLASS's LinearCombinationRelu marks the earlier
// slices with a NaN threshold, meant to make its max a no-op; but CUTLASS 4's ReLu takes a
// NaN-propagating max, so every slice but the last wrote NaN (seen on an H200: late_cnn's
// split convs answered NaN). A NaN the products make stays NaN here, as with `x < 0 ? 0 : x`.
template <typename Base>
class ReluInLastSlice : public Base {
 public:
  using typename Base::FragmentAccumulator;
  using typename Base::FragmentOutput;
  using typename Base::FragmentSource;
  using typename Base::Params;

  CUTLASS_HOST_DEVICE explicit ReluInLastSlice(Params const& params) : Base(params) {}

  CUTLASS_HOST_DEVICE void set_k_partition(int k_partition, int k_partition_count) {
    Base::set_k_partition(k_partition, k_partition_count);
    relu_ = k_partition == k_partition_count - 1;
  }

  CUTLASS_HOST_DEVICE FragmentOutput operator()(FragmentAccumulator const& accumulator,
                                                FragmentSource const& source) const {
    return relu(Base::operator()(accumulator, source));
  }

  CUTLASS_HOST_DEVICE FragmentOutput operator()(FragmentAccumulator const& accumulator) const {
    return relu(Base::operator()(accumulator));
  }

 private:
  CUTLASS_HOST_DEVICE FragmentOutput relu(FragmentOutput out) const {
    if (relu_) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentOutput::kElements; ++i) {
        out[i] = out[i] < 0.f ? 0.f : out[i];
      }
    }
    return out;
  }

  bool relu_ = true;
};

void check_status(cutlass::Status status, const char* what, const Problem& pb) {
  if (status != cutlass::Status::kSuccess) {
    TVM_FFI_THROW(RuntimeError) << "cw_cutlass_conv2d: " << what << " failed ("
                                << cutlassGetStatusString(status) << ") for x (" << pb.n << ", "
                                << pb.h << ", " << pb.w << ", " << pb.c << "), w (" << pb.k
                                << ", " << pb.r << ", " << pb.s << "), config " << pb.config
                                << ", split " << pb.split_k;
  }
}

template <typename Op, bool kResidual>
void launch(const Problem& pb, TensorView x, TensorView w, TensorView y, TensorView workspace) {
  using cutlass::layout::TensorNHWC;
  cutlass::conv::Conv2dProblemSize problem(
      pb.n, pb.h, pb.w, pb.c, pb.k, pb.r, pb.s, pb.p, pb.q, pb.pad_h, pb.pad_w, pb.stride_h,
      pb.stride_w, pb.dil_h, pb.dil_w, cutlass::conv::Mode::kCrossCorrelation, pb.split_k);
  auto ref = [](const TensorView& t, const float* data = nullptr) {
    return cutlass::TensorRef<float, TensorNHWC>(
        const_cast<float*>(data ? data : static_cast<const float*>(t.data_ptr())),
        TensorNHWC::packed({static_cast<int>(t.size(0)), static_cast<int>(t.size(1)),
                            static_cast<int>(t.size(2)), static_cast<int>(t.size(3))}));
  };
  typename Op::Arguments args;
  if constexpr (kResidual) {
    // C is the residual (shaped like y, checked), added with beta = 1; the bias is the vector
    // broadcast over the rows (ldr 0: the same for every tile of pixels)
    args = typename Op::Arguments(problem, ref(x), ref(w), ref(y, pb.residual), ref(y),
                                  {1.0f, 1.0f}, cutlass::conv::SplitKMode::kSerial,
                                  const_cast<float*>(pb.bias), nullptr, 0, pb.k);
  } else {
    // without a bias, beta = 0: y is only written; with one, C is the bias broadcast over every
    // pixel (all strides 0) and added unscaled. With serial split-K the later slices add to y.
    auto source = pb.bias ? cutlass::TensorRef<float, TensorNHWC>(const_cast<float*>(pb.bias),
                                                                   TensorNHWC::Stride(0))
                          : ref(y);
    args = typename Op::Arguments(problem, ref(x), ref(w), source, ref(y), {1.0f, 0.0f},
                                  cutlass::conv::SplitKMode::kSerial);
  }
  Op op;
  check_status(op.can_implement(args), "can_implement", pb);
  size_t need = Op::get_workspace_size(args);
  size_t have = static_cast<size_t>(workspace.size(0)) * sizeof(int32_t);
  if (need > have) {
    TVM_FFI_THROW(RuntimeError) << "cw_cutlass_conv2d: workspace of " << have << " bytes, "
                                << need << " needed (config " << pb.config << ", split "
                                << pb.split_k << ")";
  }
  auto stream = static_cast<cudaStream_t>(
      TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  check_status(op.initialize(args, need ? workspace.data_ptr() : nullptr, stream), "initialize",
               pb);
  check_status(op(stream), "launch", pb);
}

// The tile shapes, in the order of cutlass_conv.py's TILES: (threadblock M x N x K, warp M x N,
// stages). M counts output pixels (N*P*Q), N output channels. Warps of 64 x 32 at most: 3xTF32
// holds two fragments per operand, and 64 x 64 warps spilled registers (ptxas, sm_90).
template <bool kTf32, Epilogue kEpilogue>
void run(const Problem& pb, TensorView x, TensorView w, TensorView y, TensorView workspace) {
  using MathOp = typename std::conditional<kTf32, cutlass::arch::OpMultiplyAdd,
                                           cutlass::arch::OpMultiplyAddFastF32>::type;
  using Plain = cutlass::epilogue::thread::LinearCombination<float, kAlignment, float, float>;
  using Bias = cutlass::epilogue::thread::LinearCombination<
      float, kAlignment, float, float, cutlass::epilogue::thread::ScaleType::NoBetaScaling>;
  using BiasRelu = ReluInLastSlice<Bias>;
  // relu(conv + bias + residual): the activation inside is the identity (CUTLASS's serial
  // split-K needs that), the sum with the residual is `plus`, the ReLU comes last
  using ResidualPlain = cutlass::epilogue::thread::LinearCombinationResidualBlock<
      float, float, float, float, kAlignment, cutlass::epilogue::thread::Identity, cutlass::plus,
      cutlass::epilogue::thread::Identity>;
  using ResidualRelu = cutlass::epilogue::thread::LinearCombinationResidualBlock<
      float, float, float, float, kAlignment, cutlass::epilogue::thread::Identity, cutlass::plus,
      cutlass::epilogue::thread::ReLu>;
  using Residual = typename std::conditional<kEpilogue == Epilogue::kResidualRelu, ResidualRelu,
                                             ResidualPlain>::type;
  using EpilogueOp = typename std::conditional<
      has_residual(kEpilogue), Residual,
      typename std::conditional<
          kEpilogue == Epilogue::kNone, Plain,
          typename std::conditional<kEpilogue == Epilogue::kBias, Bias, BiasRelu>::type>::type>::
      type;
  constexpr bool kResidual = has_residual(kEpilogue);
  using Tile0 = TileConfig<kResidual, MathOp, EpilogueOp, 128, 128, 16, 64, 32, 3>;
  using Tile1 = TileConfig<kResidual, MathOp, EpilogueOp, 128, 64, 16, 64, 32, 3>;
  using Tile2 = TileConfig<kResidual, MathOp, EpilogueOp, 64, 64, 16, 32, 32, 4>;
  switch (pb.config) {
    case 0: return launch<typename Tile0::Op, kResidual>(pb, x, w, y, workspace);
    case 1: return launch<typename Tile1::Op, kResidual>(pb, x, w, y, workspace);
    case 2: return launch<typename Tile2::Op, kResidual>(pb, x, w, y, workspace);
    default:
      TVM_FFI_THROW(ValueError) << "cw_cutlass_conv2d: unknown tile config " << pb.config;
  }
}

#endif

template <bool kTf32>
void conv2d(TensorView x, TensorView w, Shape params, TensorView y, TensorView workspace) {
  Problem pb = read_problem(x, w, params, y, workspace);
  run<kTf32, Epilogue::kNone>(pb, x, w, y, workspace);
}

template <bool kTf32>
void conv2d_bias(TensorView x, TensorView w, TensorView bias, Shape params, TensorView y,
                 TensorView workspace) {
  Problem pb = read_problem(x, w, params, y, workspace, &bias);
  if (pb.relu) {
    run<kTf32, Epilogue::kBiasRelu>(pb, x, w, y, workspace);
  } else {
    run<kTf32, Epilogue::kBias>(pb, x, w, y, workspace);
  }
}

template <bool kTf32>
void conv2d_residual(TensorView x, TensorView w, TensorView bias, TensorView residual,
                     Shape params, TensorView y, TensorView workspace) {
  Problem pb = read_problem(x, w, params, y, workspace, &bias, &residual);
  if (pb.relu) {
    run<kTf32, Epilogue::kResidualRelu>(pb, x, w, y, workspace);
  } else {
    run<kTf32, Epilogue::kResidual>(pb, x, w, y, workspace);
  }
}

}  // namespace

// one math per CUDA object, so that a bundle links only the kernels it calls
#if defined(CW_CONV_REFERENCE) || !defined(CW_CONV_TF32)
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cw_cutlass_conv2d_v1, conv2d<false>);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cw_cutlass_conv2d_bias_v1, conv2d_bias<false>);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cw_cutlass_conv2d_residual_v1, conv2d_residual<false>);
#endif
#if defined(CW_CONV_REFERENCE) || defined(CW_CONV_TF32)
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cw_cutlass_conv2d_tf32_v1, conv2d<true>);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cw_cutlass_conv2d_bias_tf32_v1, conv2d_bias<true>);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cw_cutlass_conv2d_residual_tf32_v1, conv2d_residual<true>);
#endif
