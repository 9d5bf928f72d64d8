// nnc.hpp — a small header-only C++17 wrapper around one model compiled by nnc.
//
//   #include "libdigits.h"   // the header nnc wrote (declares digits_* and the ABI types)
//   #include "nnc.hpp"
//   nnc::Model model(digits_infer_with_workspace, digits_model_info);
//   std::vector<float> image(nnc::numel(model.info().inputs[0])), probs(4);
//   model.run({image}, {probs});   // throws nnc::Error on any mismatch or failure
//
// A Model owns an aligned workspace of the size the model reports, so it calls the
// reentrant PREFIXinfer_with_workspace: distinct Model objects may run concurrently,
// one Model must not be used by two threads at once. Given PREFIXrun,
// PREFIXworkspace_size and a thread pool (nnc_pool.h, or your own nnc_thread_pool),
// it runs through the pool instead, on a workspace sized for it:
//
//   nnc_pool *pool = nnc_pool_create(4);
//   nnc::Model model(digits_run, digits_workspace_size, digits_model_info, nnc_pool_get(pool)); It checks every buffer against
// model_info (count, dtype, element count) before calling into the library, since
// the C ABI itself cannot: it only sees pointers.
//
// An output whose extent the input values decide (NonZero, Unique, ...: see
// bounded_axes()) needs a buffer of its largest size; run_shaped() returns the
// shapes of the run, so the caller knows how much of it was written:
//
//   auto shapes = model.run_shaped({x}, {indices});   // shapes[0][1]: how many
#ifndef NNC_HPP
#define NNC_HPP

#ifndef NNC_H
#error "include the header nnc generated (or runtime-abi/include/nnc.h) before nnc.hpp"
#endif

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace nnc {

// Codes of errors the wrapper finds itself; the library's own are NNC_ERR_* (> 0).
constexpr int32_t ERR_INVALID_ARGUMENT = -1; // wrong number, dtype or size of buffers
constexpr int32_t ERR_ABI_VERSION = -2;      // library built for another NNC_ABI_VERSION
constexpr int32_t ERR_BAD_SHAPES = -3;       // the library reported a shape model_info rules out

// Every failure: the message says what, code() says which (NNC_ERR_* or ERR_* above).
class Error : public std::runtime_error {
  public:
    Error(int32_t code, const std::string &what) : std::runtime_error(what), code_(code) {}
    int32_t code() const noexcept { return code_; }

  private:
    int32_t code_;
};

// The NNC_DTYPE_* code of a C++ element type (only the types that map one to one).
template <class T> struct dtype_of;
#define NNC_HPP_DTYPE(T, CODE)                                                                \
    template <> struct dtype_of<T> { static constexpr int32_t value = CODE; }
NNC_HPP_DTYPE(float, NNC_DTYPE_FLOAT);
NNC_HPP_DTYPE(double, NNC_DTYPE_DOUBLE);
NNC_HPP_DTYPE(int8_t, NNC_DTYPE_INT8);
NNC_HPP_DTYPE(uint8_t, NNC_DTYPE_UINT8);
NNC_HPP_DTYPE(int16_t, NNC_DTYPE_INT16);
NNC_HPP_DTYPE(uint16_t, NNC_DTYPE_UINT16);
NNC_HPP_DTYPE(int32_t, NNC_DTYPE_INT32);
NNC_HPP_DTYPE(uint32_t, NNC_DTYPE_UINT32);
NNC_HPP_DTYPE(int64_t, NNC_DTYPE_INT64);
NNC_HPP_DTYPE(uint64_t, NNC_DTYPE_UINT64);
NNC_HPP_DTYPE(bool, NNC_DTYPE_BOOL); // the ABI's BOOL is one byte per element
#undef NNC_HPP_DTYPE
static_assert(sizeof(bool) == 1, "NNC_DTYPE_BOOL buffers need a one-byte bool");

// Number of elements of a tensor (1 for a scalar).
inline size_t numel(const nnc_tensor_info &t) {
    size_t n = 1;
    for (int32_t i = 0; i < t.rank; i++) n *= static_cast<size_t>(t.dims[i]);
    return n;
}

// A non-owning view of a typed buffer (C++17 has no std::span): built from a pointer
// and an element count, or from any contiguous container with data() and size()
// (std::vector, std::array, std::span). Data is `const void *` for inputs, `void *`
// for outputs.
template <class Ptr> struct BufferView {
    Ptr data;
    size_t size;    // elements
    int32_t dtype;  // NNC_DTYPE_* of the element type
    template <class T>
    BufferView(T *p, size_t n) : data(p), size(n), dtype(dtype_of<std::remove_cv_t<T>>::value) {}
    // (Not for BufferView itself, so that copying a view stays a copy.)
    template <class C, std::enable_if_t<!std::is_same_v<std::remove_cv_t<C>, BufferView>, int> = 0>
    BufferView(C &c) : BufferView(c.data(), c.size()) {}
};
using Input = BufferView<const void *>;
using Output = BufferView<void *>;

class Model {
  public:
    Model(nnc_infer_with_workspace_fn infer, nnc_model_info_fn model_info)
        : infer_(infer), info_(checked(model_info())),
          // The ABI wants a non-NULL, aligned workspace even when its size is 0.
          workspace_(::operator new(info_->workspace_size ? info_->workspace_size : 1,
                                    std::align_val_t(info_->workspace_align)),
                     AlignedDelete{info_->workspace_align}) {}

    // Runs through PREFIXrun with `pool` (which must outlive the Model; NULL: the
    // calling thread alone), on a workspace of PREFIXworkspace_size bytes for it.
    Model(nnc_run_fn run, nnc_workspace_size_fn workspace_size, nnc_model_info_fn model_info,
          const nnc_thread_pool *pool)
        : infer_(nullptr), run_(run), info_(checked(model_info())),
          options_{sizeof(nnc_run_options), pool, 0, nullptr, nullptr},
          workspace_(allocate(workspace_size(&options_), info_->workspace_align),
                     AlignedDelete{info_->workspace_align}) {
        options_.workspace_bytes = workspace_size(&options_);
    }

    const nnc_model_info &info() const { return *info_; }

    // The CPU variants the library carries, most capable first ("" before ABI 10),
    // and the features a CPU needs to run it at all: elsewhere run() throws with
    // NNC_ERR_UNSUPPORTED_CPU.
    std::string cpu_variants() const {
        return info_->abi_version >= 10 && info_->cpu_variants ? info_->cpu_variants : "";
    }
    std::string required_cpu_features() const {
        return info_->abi_version >= 10 && info_->required_cpu_features
                   ? info_->required_cpu_features
                   : "";
    }

    // The output axes whose extent the input values decide: each output's size in
    // model_info is its largest, the size its buffer must have; run_shaped() reports
    // the extent of a run.
    std::vector<nnc_bounded_axis> bounded_axes() const {
        if (info_->num_bounded_axes == 0) return {};
        return {info_->bounded_axes, info_->bounded_axes + info_->num_bounded_axes};
    }

    // Runs the model: inputs and outputs in model_info order, each checked against
    // model_info's dtype and shape. Throws nnc::Error; outputs are written only on success.
    void run(std::initializer_list<Input> inputs, std::initializer_list<Output> outputs) {
        check("input", inputs, info_->num_inputs, info_->inputs, 0);
        check("output", outputs, info_->num_outputs, info_->outputs, info_->num_inputs);
        std::vector<const void *> in;
        for (const Input &b : inputs) in.push_back(b.data);
        std::vector<void *> out;
        for (const Output &b : outputs) out.push_back(b.data);
        int32_t rc = run_ ? run_(in.data(), out.data(), workspace_.get(), &options_)
                          : infer_(in.data(), out.data(), workspace_.get());
        if (rc != NNC_OK) throw Error(rc, "infer failed with NNC error code " + std::to_string(rc));
    }

    // For a model with dims set at run time (info().num_dims of them, in that order):
    // runs for their values `dims`, each buffer checked against the shape these values
    // give it. Needs the PREFIXrun constructor. Throws nnc::Error, with code
    // NNC_ERR_DIM_OUT_OF_RANGE for a value outside its dim's range.
    void run(const std::vector<int64_t> &dims, std::initializer_list<Input> inputs,
             std::initializer_list<Output> outputs) {
        if (!run_) throw Error(ERR_INVALID_ARGUMENT, "run with dims needs the PREFIXrun constructor");
        check_dims(dims);
        check("input", inputs, info_->num_inputs, info_->inputs, 0, dims.data());
        check("output", outputs, info_->num_outputs, info_->outputs, info_->num_inputs,
              dims.data());
        std::vector<const void *> in;
        for (const Input &b : inputs) in.push_back(b.data);
        std::vector<void *> out;
        for (const Output &b : outputs) out.push_back(b.data);
        nnc_run_options options = options_;
        options.dims = dims.empty() ? nullptr : dims.data();
        int32_t rc = run_(in.data(), out.data(), workspace_.get(), &options);
        if (rc != NNC_OK) throw Error(rc, "run failed with NNC error code " + std::to_string(rc));
    }

    // run() that also returns every output's shape for this run, outputs in order: a
    // bounded axis (bounded_axes()) has the extent the input values gave it, and its
    // output is written densely for that extent at the start of its buffer; every
    // other axis has its size. A model with bounded axes needs the PREFIXrun
    // constructor (infer cannot report them). Throws nnc::Error, with code
    // ERR_BAD_SHAPES if the library reports a shape that model_info rules out.
    std::vector<std::vector<int64_t>> run_shaped(std::initializer_list<Input> inputs,
                                                 std::initializer_list<Output> outputs) {
        return run_shaped_for(nullptr, inputs, outputs);
    }

    // run_shaped() for the dims' values `dims`, as run(dims, inputs, outputs).
    std::vector<std::vector<int64_t>> run_shaped(const std::vector<int64_t> &dims,
                                                 std::initializer_list<Input> inputs,
                                                 std::initializer_list<Output> outputs) {
        if (!run_) throw Error(ERR_INVALID_ARGUMENT, "run with dims needs the PREFIXrun constructor");
        check_dims(dims);
        return run_shaped_for(dims.empty() ? nullptr : dims.data(), inputs, outputs);
    }

    // Elements of input or output `tensor` (inputs first) for the dims' values `dims`
    // (NULL: the sizes in model_info, every dim at its maximum).
    size_t numel_for(uint32_t tensor, const int64_t *dims) const {
        size_t n = 1;
        for (int64_t size : shape_for(tensor, dims)) n *= static_cast<size_t>(size);
        return n;
    }

    // The shape of input or output `tensor` (inputs first) for the dims' values `dims`
    // (NULL: the sizes in model_info); a bounded axis has its largest extent.
    std::vector<int64_t> shape_for(uint32_t tensor, const int64_t *dims) const {
        const nnc_tensor_info &t = tensor < info_->num_inputs
                                       ? info_->inputs[tensor]
                                       : info_->outputs[tensor - info_->num_inputs];
        std::vector<int64_t> shape(t.dims, t.dims + t.rank);
        for (uint32_t k = 0; dims && k < info_->num_axis_dims; k++) {
            const nnc_axis_dim &a = info_->axis_dims[k];
            if (a.tensor != tensor || a.axis >= shape.size()) continue;
            int64_t size = a.scale * dims[a.dim];
            // Since ABI 6: an output's size derived from the dim (a conv's formula).
            if (info_->abi_version >= 6 && info_->axis_extents) {
                const nnc_axis_extent &e = info_->axis_extents[k];
                for (uint32_t s = 0; s < e.num_steps; s++)
                    size = (size + e.steps[s].add) / e.steps[s].div;
            }
            shape[a.axis] = size;
        }
        return shape;
    }

  private:
    void check_dims(const std::vector<int64_t> &dims) const {
        if (dims.size() != info_->num_dims)
            throw Error(ERR_INVALID_ARGUMENT, "model has " + std::to_string(info_->num_dims) +
                                                  " dims, got " + std::to_string(dims.size()));
        for (uint32_t j = 0; j < info_->num_dims; j++)
            if (dims[j] < info_->dims[j].min || dims[j] > info_->dims[j].max)
                throw Error(NNC_ERR_DIM_OUT_OF_RANGE,
                            std::string("dim \"") + info_->dims[j].name + "\" = " +
                                std::to_string(dims[j]) + " is outside " +
                                std::to_string(info_->dims[j].min) + ".." +
                                std::to_string(info_->dims[j].max));
    }

    // `dims`: checked values, or NULL for every dim at its maximum.
    std::vector<std::vector<int64_t>> run_shaped_for(const int64_t *dims,
                                                     std::initializer_list<Input> inputs,
                                                     std::initializer_list<Output> outputs) {
        if (!run_ && info_->num_bounded_axes > 0)
            throw Error(ERR_INVALID_ARGUMENT,
                        "run_shaped of a model with bounded axes needs the PREFIXrun constructor");
        check("input", inputs, info_->num_inputs, info_->inputs, 0, dims);
        check("output", outputs, info_->num_outputs, info_->outputs, info_->num_inputs, dims);
        std::vector<std::vector<int64_t>> shapes;
        size_t total = 0;
        for (uint32_t i = 0; i < info_->num_outputs; i++) {
            shapes.push_back(shape_for(info_->num_inputs + i, dims));
            total += shapes.back().size();
        }
        std::vector<const void *> in;
        for (const Input &b : inputs) in.push_back(b.data);
        std::vector<void *> out;
        for (const Output &b : outputs) out.push_back(b.data);
        if (!run_) {
            // No bounded axis: every output has its model_info shape.
            int32_t rc = infer_(in.data(), out.data(), workspace_.get());
            if (rc != NNC_OK) throw Error(rc, "infer failed with NNC error code " + std::to_string(rc));
            return shapes;
        }
        // A value the library leaves unwritten stays -1 and fails the check below.
        std::vector<int64_t> reported(total, -1);
        nnc_run_options options = options_;
        options.dims = dims;
        options.output_shapes = total ? reported.data() : nullptr;
        int32_t rc = run_(in.data(), out.data(), workspace_.get(), &options);
        if (rc != NNC_OK) throw Error(rc, "run failed with NNC error code " + std::to_string(rc));
        const int64_t *v = reported.data();
        for (uint32_t i = 0; i < info_->num_outputs; i++) {
            for (size_t axis = 0; axis < shapes[i].size(); axis++, v++) {
                bool bounded = false;
                for (uint32_t k = 0; k < info_->num_bounded_axes; k++)
                    bounded |= info_->bounded_axes[k].output == i && info_->bounded_axes[k].axis == axis;
                int64_t bound = shapes[i][axis];
                if (bounded ? *v < 0 || *v > bound : *v != bound)
                    throw Error(ERR_BAD_SHAPES,
                                "output " + std::to_string(i) + " \"" + info_->outputs[i].name +
                                    "\": run reported " + std::to_string(*v) + " for axis " +
                                    std::to_string(axis) + ", which has " +
                                    (bounded ? "at most " : "exactly ") + std::to_string(bound));
                shapes[i][axis] = *v;
            }
        }
        return shapes;
    }

    // ABI 5 libraries run too: version 6 only appended axis_extents, which this
    // wrapper reads behind an abi_version check.
    static const nnc_model_info *checked(const nnc_model_info *info) {
        if (info->abi_version < 5 || info->abi_version > NNC_ABI_VERSION)
            throw Error(ERR_ABI_VERSION, "model built for ABI version " +
                                             std::to_string(info->abi_version) + ", expected 5 to " +
                                             std::to_string(NNC_ABI_VERSION));
        return info;
    }

    template <class Buffer>
    void check(const char *kind, std::initializer_list<Buffer> given, uint32_t count,
               const nnc_tensor_info *expected, uint32_t first,
               const int64_t *dims = nullptr) const {
        if (given.size() != count)
            throw Error(ERR_INVALID_ARGUMENT, std::string("model has ") + std::to_string(count) +
                                                  " " + kind + "s, got " +
                                                  std::to_string(given.size()));
        const Buffer *b = given.begin();
        for (uint32_t i = 0; i < count; i++, b++) {
            const nnc_tensor_info &t = expected[i];
            std::string what = std::string(kind) + " " + std::to_string(i) + " \"" + t.name + "\"";
            if (b->dtype != t.dtype)
                throw Error(ERR_INVALID_ARGUMENT, what + ": dtype " + std::to_string(b->dtype) +
                                                      ", model wants " + std::to_string(t.dtype));
            size_t wanted = numel_for(first + i, dims);
            if (b->size != wanted)
                throw Error(ERR_INVALID_ARGUMENT, what + ": " + std::to_string(b->size) +
                                                      " elements, model wants " +
                                                      std::to_string(wanted));
        }
    }

    static void *allocate(uint64_t bytes, uint64_t align) {
        return ::operator new(bytes ? bytes : 1, std::align_val_t(align));
    }

    struct AlignedDelete {
        size_t align;
        void operator()(void *p) const { ::operator delete(p, std::align_val_t(align)); }
    };

    nnc_infer_with_workspace_fn infer_;
    nnc_run_fn run_ = nullptr;
    const nnc_model_info *info_;
    nnc_run_options options_{sizeof(nnc_run_options), nullptr, 0, nullptr, nullptr};
    std::unique_ptr<void, AlignedDelete> workspace_;
};

} // namespace nnc

#endif // NNC_HPP
