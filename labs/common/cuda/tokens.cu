// tokens.cu — the two ops that read token arrays, on the GPU: the embeddings at the model's
// input and the softmax cross-entropy at its output (ops.h's contract; the math and the CPU
// versions are in ops.c). The tokens and targets stay in host memory (gpu.h); each kernel
// reads the device copy cuda_stage_tokens() makes.
//
// Defines (context.cuh): cuda_embedding_forward(), cuda_embedding_backward(),
//                        cuda_crossentropy_forward(), cuda_crossentropy_backward().
//
// The rules every kernel keeps (determinism, one stream) are at the top of ops.cu.
#include <math.h>

#include "context.cuh"

// ---------------------------------------------------------------------------------------
// Embeddings. The backward is a gather: the thread owning dwte[v, c] scans the B*T tokens in
// order and adds the rows whose token is v, which is the order the CPU adds them in.
// ---------------------------------------------------------------------------------------

enum { TOKEN_VALUES = 256 };  // tokens are bytes, so the vocabulary holds at most 256 rows

// out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c], one thread per output float.
__global__ static void embedding_forward_kernel(float *out, const uint8_t *tokens, const float *wte, const float *wpe,
                                                int B, int T, int C) {
    size_t i = thread_index();
    if (i >= (size_t)B * T * C) return;
    size_t n = i / C;
    int c = (int)(i % C), t = (int)(n % T);
    out[i] = wte[(size_t)tokens[n] * C + c] + wpe[(size_t)t * C + c];
}

// dwte[v, c] += dout[n, c] for every n with tokens[n] == v. Rows of tokens that do not occur
// are never touched, so a vocabulary smaller than 256 is never written past.
__global__ static void embedding_backward_wte_kernel(float *dwte, const float *dout, const uint8_t *tokens, int BT,
                                                     int C) {
    size_t i = thread_index();
    if (i >= (size_t)TOKEN_VALUES * C) return;
    int v = (int)(i / C), c = (int)(i % C);
    float *dst = dwte + (size_t)v * C + c;
    float acc = 0.0f;
    int seen = 0;
    for (int n = 0; n < BT; n++)
        if (tokens[n] == v) {
            if (!seen) {
                acc = *dst;  // the first occurrence starts from the gradient so far
                seen = 1;
            }
            acc += dout[(size_t)n * C + c];
        }
    if (seen) *dst = acc;
}

void cuda_embedding_forward(float *out, const uint8_t *tokens, const float *wte, const float *wpe, int B, int T,
                            int C) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    const uint8_t *tokens_dev = cuda_stage_tokens(tokens, (size_t)B * T);
    embedding_forward_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(out, tokens_dev, wte, wpe, B,
                                                                                       T, C);
    cudaCheck(cudaGetLastError());
}

void cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens, int B, int T,
                             int C) {
    if ((size_t)B * T * C == 0) return;
    const uint8_t *tokens_dev = cuda_stage_tokens(tokens, (size_t)B * T);
    embedding_backward_wte_kernel<<<blocks_for((size_t)TOKEN_VALUES * C, THREADS), THREADS, 0, compute_stream()>>>(
        dwte, dout, tokens_dev, B * T, C);
    cudaCheck(cudaGetLastError());
    // dwpe[t, c] += sum over b of dout[b, t, c]: the column sums of dout seen as [B, T*C].
    cuda_column_sums(dwpe, dout, B, T * C);
}

// ---------------------------------------------------------------------------------------
// Softmax cross-entropy (math in ops.c). One warp per row; each row's loss is computed in
// double on the device and the host adds the rows in order, as crossentropy_forward does.
// ---------------------------------------------------------------------------------------

__global__ static void crossentropy_forward_kernel(float *logits, const uint8_t *targets, int N, int V,
                                                   double *row_loss) {
    size_t n = warp_row();
    if (n >= (size_t)N) return;
    int lane = threadIdx.x % WARP;
    float *z = logits + n * V;
    float target_z = z[targets[n]];
    float maxz = -INFINITY;
    for (int v = lane; v < V; v += WARP) maxz = fmaxf(maxz, z[v]);
    maxz = warp_max(maxz);
    __syncwarp();  // every lane has read target_z before any lane overwrites the row
    float sum = 0.0f;
    for (int v = lane; v < V; v += WARP) {
        float e = expf(z[v] - maxz);
        z[v] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int v = lane; v < V; v += WARP) z[v] *= inv;
    if (lane == 0) row_loss[n] = log((double)sum) + (double)maxz - (double)target_z;
}

// dlogits[n, v] = probs[n, v] * scale, minus scale at the target.
__global__ static void crossentropy_backward_kernel(float *dlogits, const float *probs, const uint8_t *targets, int N,
                                                    int V, float scale) {
    size_t i = thread_index();
    if (i >= (size_t)N * V) return;
    size_t n = i / V;
    int v = (int)(i % V);
    float d = probs[i] * scale;
    if (v == targets[n]) d -= scale;
    dlogits[i] = d;
}

double cuda_crossentropy_forward(float *probs_from_logits, const uint8_t *targets, int N, int V) {
    if (N <= 0) return 0.0;
    const uint8_t *targets_dev = cuda_stage_tokens(targets, (size_t)N);
    double *row_loss = (double *)cuda_workspace((size_t)N * sizeof(double));
    crossentropy_forward_kernel<<<warp_blocks_for((size_t)N), WARP_BLOCK_THREADS, 0, compute_stream()>>>(
        probs_from_logits, targets_dev, N, V, row_loss);
    cudaCheck(cudaGetLastError());
    return cuda_sum_on_host(row_loss, (size_t)N);
}

void cuda_crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, int N, int V,
                                float scale) {
    size_t n = (size_t)N * V;
    if (n == 0) return;
    const uint8_t *targets_dev = cuda_stage_tokens(targets, (size_t)N);
    crossentropy_backward_kernel<<<blocks_for(n, THREADS), THREADS, 0, compute_stream()>>>(dlogits, probs,
                                                                                           targets_dev, N, V, scale);
    cudaCheck(cudaGetLastError());
}
