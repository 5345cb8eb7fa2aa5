#pragma once
// Element-wise and row-wise operations of the forward pass. All take sizes
// explicitly; none allocate. Functions with a _scalar twin run the kernel of
// the current level (kernel_table.h) and are tested against the twin; the
// others the compiler vectorizes.
#include <cstdint>

namespace tally {

// out = x / rms(x) * weight, over n values.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);
// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n);
// out[i] = gelu(gate[i]) * up[i], GELU's tanh form (Gemma's gelu_pytorch_tanh):
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). Plain code the compiler vectorizes.
// Computed as x * sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3): the same
// number as 0.5 x (1 + tanh y), with one exp that the SIMD kernels mirror.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);
void gelu_tanh_mul_scalar(const float* gate, const float* up, float* out, int64_t n);
inline constexpr float kGeluTwoC = 1.5957691216057308f;  // 2 sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;
// out[i] = x[i] rounded to binary16 (nearest even), as f32_to_f16 does.
void to_f16(const float* x, uint16_t* out, int64_t n);
void to_f16_scalar(const float* x, uint16_t* out, int64_t n);
// out[i] = e^x[i] by std::exp: the scalar twin of the kernel table's exp_each,
// the exp that the SwiGLU, GELU and softmax kernels evaluate inline
// (exp_simd.h, within 0.55 ulp as glibc's expf is within 0.502). The engine
// calls no exp_each of its own; the table entry lets tests reach each level's.
void exp_each_scalar(const float* x, float* out, int64_t n);
// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t n);

// How RoPE pairs the dimensions of a head: a property of the architecture.
enum class RopePairing {
  Adjacent,   // (2i, 2i+1): GGUF `llama` (the converter permuted q/k rows)
  HalfSplit,  // (i, i + rot_dims/2): Hugging Face "rotate_half", GGUF qwen2/qwen3
};

// cos/sin of the rot_dims/2 angles of position pos: angle i = pos * base^(-2i/rot_dims).
void rope_angles(int64_t pos, int64_t rot_dims, float base, float* cos_out, float* sin_out);
// Rotates the first rot_dims dimensions of each of n_heads head vectors
// (head_dim apart) by the angles from rope_angles.
void rope_apply(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dims, const float* cos_a,
                const float* sin_a, RopePairing pairing);

}  // namespace tally
