// Training BatchNorm of a channels_last batch dealt in turn to `groups` emulated GPUs (image n
// belongs to GPU n % groups), on the CPU, in as many passes over memory as torch's own
// BatchNorm: two for the statistics and one for the output forward, one for the sums and one for
// the input gradient backward. The batch's memory is rows of C values (one per pixel of each
// image, images in order), so every pass is a loop over rows with a vectorisable loop over
// channels inside, each thread summing into its own (groups x C) accumulators.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace {

using Acc = double;  // per GPU and channel: sums over up to millions of values

struct Shape {
  int64_t images, channels, pixels, groups;
  int64_t count() const { return images / groups * pixels; }  // values per GPU and channel
};

Shape shape_of(const at::Tensor& x, int64_t groups) {
  TORCH_CHECK(x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast),
              "grouped_bn: a 4-d channels_last tensor is needed");
  TORCH_CHECK(groups >= 1 && x.size(0) % groups == 0, "grouped_bn: the batch must deal evenly");
  return {x.size(0), x.size(1), x.size(2) * x.size(3), groups};
}

// body(image_sums, image, first row of the image) sums `width` x C values over one image's
// pixels in float (vectorised; a few thousand values at most); they are added per GPU into
// per-thread double accumulators of width x (groups x C), then over threads
template <typename Body>
std::vector<Acc> summed(const Shape& s, int width, const Body& body) {
  const int64_t C = s.channels, size = width * s.groups * C;
  const int threads = at::get_num_threads();
  std::vector<Acc> partial(static_cast<size_t>(threads) * size, 0.0);
  at::parallel_for(0, s.images, 1, [&](int64_t begin, int64_t end) {
    Acc* mine = partial.data() + static_cast<int64_t>(at::get_thread_num()) * size;
    std::vector<float> image(width * C);
    for (int64_t n = begin; n < end; ++n) {
      std::fill(image.begin(), image.end(), 0.0f);
      body(image.data(), n, n * s.pixels);
      for (int k = 0; k < width; ++k) {
        Acc* to = mine + k * s.groups * C + (n % s.groups) * C;
        for (int64_t c = 0; c < C; ++c) to[c] += image[k * C + c];
      }
    }
  });
  std::vector<Acc> total(size, 0.0);
  for (int t = 0; t < threads; ++t)
    for (int64_t i = 0; i < size; ++i) total[i] += partial[t * size + i];
  return total;
}

// GPU 0's statistics into the running ones, as DDP keeps rank 0's buffers: the unbiased
// variance, moved towards by `momentum` (torch's BatchNorm update)
void update_running(float* running_mean, float* running_var, const std::vector<Acc>& mean,
                    const std::vector<Acc>& squares, const Shape& s, double momentum) {
  const Acc count = static_cast<Acc>(s.count());
  const Acc unbiased = 1.0 / std::max(count - 1.0, 1.0);
  for (int64_t c = 0; c < s.channels; ++c) {
    running_mean[c] = static_cast<float>(running_mean[c] + momentum * (mean[c] - running_mean[c]));
    running_var[c] = static_cast<float>(running_var[c] + momentum * (squares[c] * unbiased - running_var[c]));
  }
}

template <typename T>
std::vector<at::Tensor> forward_typed(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                      const Shape& s, double eps, float* running_mean, float* running_var,
                                      double momentum) {
  const T* data = x.data_ptr<T>();
  const int64_t C = s.channels, G = s.groups, P = s.pixels;
  const float* w = weight.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  auto sums = summed(s, 1, [&](float* part, int64_t, int64_t row) {
    for (int64_t p = 0; p < P; ++p) {
      const T* v = data + (row + p) * C;
      for (int64_t c = 0; c < C; ++c) part[c] += static_cast<float>(v[c]);
    }
  });
  const Acc count = static_cast<Acc>(s.count());
  std::vector<Acc> mean(G * C);
  std::vector<float> mean_f(G * C);
  for (int64_t i = 0; i < G * C; ++i) mean_f[i] = static_cast<float>(mean[i] = sums[i] / count);
  // centred before squaring: a mean far from zero does not swamp the variance
  auto squares = summed(s, 1, [&](float* part, int64_t n, int64_t row) {
    const float* m = mean_f.data() + (n % G) * C;
    for (int64_t p = 0; p < P; ++p) {
      const T* v = data + (row + p) * C;
      for (int64_t c = 0; c < C; ++c) {
        const float d = static_cast<float>(v[c]) - m[c];
        part[c] += d * d;
      }
    }
  });
  auto stats = at::TensorOptions().dtype(at::kFloat);
  at::Tensor mean_out = at::empty({G, C}, stats), invstd_out = at::empty({G, C}, stats);
  float* mean_to = mean_out.data_ptr<float>();
  float* invstd_to = invstd_out.data_ptr<float>();
  std::vector<float> scale(G * C), shift(G * C);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = g * C + c;
      const Acc invstd = 1.0 / std::sqrt(squares[i] / count + eps);
      mean_to[i] = static_cast<float>(mean[i]);
      invstd_to[i] = static_cast<float>(invstd);
      scale[i] = static_cast<float>(invstd * w[c]);
      shift[i] = static_cast<float>(b[c] - mean[i] * invstd * w[c]);
    }
  if (running_mean != nullptr) update_running(running_mean, running_var, mean, squares, s, momentum);
  at::Tensor y = at::empty_like(x, x.options(), at::MemoryFormat::ChannelsLast);
  T* out = y.data_ptr<T>();
  at::parallel_for(0, s.images, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* a = scale.data() + (n % G) * C;
      const float* k = shift.data() + (n % G) * C;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t at_row = (n * P + p) * C;
        for (int64_t c = 0; c < C; ++c)
          out[at_row + c] = static_cast<T>(static_cast<float>(data[at_row + c]) * a[c] + k[c]);
      }
    }
  });
  return {y, mean_out, invstd_out};
}

template <typename T>
std::vector<at::Tensor> backward_typed(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                                       const at::Tensor& mean, const at::Tensor& invstd, const Shape& s) {
  const T* dy = grad.data_ptr<T>();
  const T* data = x.data_ptr<T>();
  const int64_t C = s.channels, G = s.groups, P = s.pixels;
  const float* w = weight.data_ptr<float>();
  const float* m = mean.data_ptr<float>();
  const float* is = invstd.data_ptr<float>();
  // per GPU and channel: the sum of the gradient and of the gradient times (x - mean)
  auto sums = summed(s, 2, [&](float* part, int64_t n, int64_t row) {
    float* sum_dy = part;
    float* sum_dy_xmu = part + C;
    const float* mg = m + (n % G) * C;
    for (int64_t p = 0; p < P; ++p) {
      const T* d = dy + (row + p) * C;
      const T* v = data + (row + p) * C;
      for (int64_t c = 0; c < C; ++c) {
        const float gv = static_cast<float>(d[c]);
        sum_dy[c] += gv;
        sum_dy_xmu[c] += gv * (static_cast<float>(v[c]) - mg[c]);
      }
    }
  });
  const Acc count = static_cast<Acc>(s.count());
  // dx = a * dy + k * x + c0, with a = invstd * w, k = -a * invstd^2 * mean(dy (x - mean)),
  // c0 = -a * mean(dy) - k * mean
  std::vector<float> a(G * C), k(G * C), c0(G * C);
  std::vector<Acc> gw(C, 0.0), gb(C, 0.0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = g * C + c;
      const Acc scale = static_cast<Acc>(is[i]) * w[c];
      const Acc mean_dy = sums[i] / count, mean_dy_xmu = sums[G * C + i] / count;
      const Acc kk = -scale * is[i] * is[i] * mean_dy_xmu;
      a[i] = static_cast<float>(scale);
      k[i] = static_cast<float>(kk);
      c0[i] = static_cast<float>(-scale * mean_dy - kk * m[i]);
      gw[c] += sums[G * C + i] * is[i];
      gb[c] += sums[i];
    }
  auto params = at::TensorOptions().dtype(at::kFloat);
  at::Tensor grad_weight = at::empty({C}, params), grad_bias = at::empty({C}, params);
  std::copy(gw.begin(), gw.end(), grad_weight.data_ptr<float>());  // double to float
  std::copy(gb.begin(), gb.end(), grad_bias.data_ptr<float>());
  at::Tensor grad_x = at::empty_like(x, x.options(), at::MemoryFormat::ChannelsLast);
  T* out = grad_x.data_ptr<T>();
  at::parallel_for(0, s.images, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t g = n % G;
      const float *ag = a.data() + g * C, *kg = k.data() + g * C, *cg = c0.data() + g * C;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t at_row = (n * P + p) * C;
        for (int64_t c = 0; c < C; ++c)
          out[at_row + c] = static_cast<T>(ag[c] * static_cast<float>(dy[at_row + c]) +
                                           kg[c] * static_cast<float>(data[at_row + c]) + cg[c]);
      }
    }
  });
  return {grad_x, grad_weight, grad_bias};
}

void check_params(const at::Tensor& t, int64_t channels, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == channels,
              "grouped_bn: ", what, " must be a contiguous float32 CPU tensor of one value per channel");
}

// running_mean and running_var: both float32 buffers updated in place, or both None (a layer
// without running statistics)
std::vector<at::Tensor> normalise(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                int64_t groups, double eps, const std::optional<at::Tensor>& running_mean,
                                const std::optional<at::Tensor>& running_var, double momentum) {
  TORCH_CHECK(x.device().is_cpu(), "grouped_bn: CPU tensors only");
  const Shape s = shape_of(x, groups);
  check_params(weight, s.channels, "weight");
  check_params(bias, s.channels, "bias");
  const bool running = running_mean.has_value() && running_mean->defined();
  TORCH_CHECK(running == (running_var.has_value() && running_var->defined()),
              "grouped_bn: running_mean and running_var come together");
  if (running) {
    check_params(*running_mean, s.channels, "running_mean");
    check_params(*running_var, s.channels, "running_var");
  }
  float* mean_to = running ? running_mean->data_ptr<float>() : nullptr;
  float* var_to = running ? running_var->data_ptr<float>() : nullptr;
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "grouped_bn_forward", [&] {
    out = forward_typed<scalar_t>(x, weight, bias, s, eps, mean_to, var_to, momentum);
  });
  return out;
}

std::vector<at::Tensor> normalise_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                                 const at::Tensor& mean, const at::Tensor& invstd, int64_t groups) {
  const Shape s = shape_of(x, groups);
  TORCH_CHECK(grad.sizes() == x.sizes() && grad.scalar_type() == x.scalar_type() &&
                  grad.is_contiguous(at::MemoryFormat::ChannelsLast),
              "grouped_bn: the gradient must match the input's shape, type and layout");
  check_params(weight, s.channels, "weight");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "grouped_bn_backward", [&] {
    out = backward_typed<scalar_t>(grad, x, weight, mean.contiguous(), invstd.contiguous(), s);
  });
  return out;
}

// Forward and backward as one autograd node in C++: a layer then costs one call from Python,
// as torch's own BatchNorm does. At a few pixels an image, a Python autograd Function's own
// overhead would cost about as much as the normalisation.
struct GroupedBatchNorm : public torch::autograd::Function<GroupedBatchNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t groups, double eps,
                            const std::optional<at::Tensor>& running_mean,
                            const std::optional<at::Tensor>& running_var, double momentum) {
    auto out = normalise(x, weight, bias, groups, eps, running_mean, running_var, momentum);
    ctx->save_for_backward({x, weight, out[1], out[2]});
    ctx->saved_data["groups"] = groups;
    return out[0];
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    auto grad = grads[0].contiguous(at::MemoryFormat::ChannelsLast).to(x.scalar_type());
    auto out = normalise_backward(grad, x, saved[1], saved[2], saved[3], ctx->saved_data["groups"].toInt());
    const at::Tensor none;
    return {out[0], ctx->needs_input_grad(1) ? out[1] : none, ctx->needs_input_grad(2) ? out[2] : none,
            none, none, none, none, none};
  }
};

at::Tensor batch_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int64_t groups,
                      double eps, const std::optional<at::Tensor>& running_mean,
                      const std::optional<at::Tensor>& running_var, double momentum) {
  return GroupedBatchNorm::apply(x, weight, bias, groups, eps, running_mean, running_var, momentum);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("batch_norm", &batch_norm, "grouped BatchNorm, differentiable (channels_last, CPU)");
}
