/* A stand-in for the CUDA driver library, so that tests/test_emit_c.py can run `tkc compile --emit c`
 * output on a machine without a GPU. It is compiled against the real cuda.h, so every definition
 * must match the header's declaration. Each driver call the generated code makes prints one JSON
 * line with its arguments and succeeds; the test compares them with what tkir.backend.runtime
 * computes for the same arguments. "Device" memory is host memory (malloc), so that the GPU test's
 * main.c (tests/test_emit_c_gpu.py) can also run here, with a launch that computes nothing.
 *
 * Environment: STUB_SMS (multiprocessor count, default 132), STUB_PTX_OUT (a file to write the PTX
 * that cuModuleLoadData receives).
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One letter per kernel parameter, set by the test's main: m tensor map, p pointer, i i32, u u32,
 * l i64, f f32. */
const char *stub_param_kinds = "";
static uint64_t stub_maps;  /* tensor maps encoded so far: each map's first word is its number */

#define STUB_FUNCTION ((CUfunction)(uintptr_t)0xF0)
#define STUB_MODULE ((CUmodule)(uintptr_t)0xE0)
#define STUB_CONTEXT ((CUcontext)(uintptr_t)0xC0)
#define STUB_STREAM ((CUstream)(uintptr_t)0x5E)

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    return Flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    *device = ordinal;
    return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    (void)dev;
    *pctx = STUB_CONTEXT;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    (void)dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    return ctx == STUB_CONTEXT ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    (void)Flags;
    *phStream = STUB_STREAM;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    return hStream == STUB_STREAM ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    return hStream == STUB_STREAM ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    *pStr = error == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_(stub)";
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    memcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    const char *sms = getenv("STUB_SMS");
    (void)dev;
    if (attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) {
        *pi = sms != NULL ? atoi(sms) : 132;
    } else if (attrib == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) {
        *pi = 232448;
    } else {
        printf("{\"call\": \"cuDeviceGetAttribute\", \"unexpected\": %d}\n", (int)attrib);
        return CUDA_ERROR_INVALID_VALUE;
    }
    printf("{\"call\": \"cuDeviceGetAttribute\", \"attrib\": %d, \"value\": %d}\n", (int)attrib, *pi);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    const char *out = getenv("STUB_PTX_OUT");
    size_t n = strlen((const char *)image);
    if (out != NULL) {
        FILE *f = fopen(out, "wb");
        if (f == NULL || fwrite(image, 1, n, f) != n) {
            return CUDA_ERROR_FILE_NOT_FOUND;
        }
        fclose(f);
    }
    printf("{\"call\": \"cuModuleLoadData\", \"bytes\": %zu}\n", n);
    *module = STUB_MODULE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    printf("{\"call\": \"cuModuleGetFunction\", \"module_ok\": %d, \"name\": \"%s\"}\n", hmod == STUB_MODULE, name);
    *hfunc = STUB_FUNCTION;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    printf("{\"call\": \"cuModuleUnload\", \"module_ok\": %d}\n", hmod == STUB_MODULE);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    printf("{\"call\": \"cuFuncSetAttribute\", \"function_ok\": %d, \"attrib\": %d, \"value\": %d}\n",
           hfunc == STUB_FUNCTION, (int)attrib, value);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    (void)hfunc;
    if (attrib != CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pi = 1024;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    void *p = malloc(bytesize > 0 ? bytesize : 1);
    if (p == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    printf("{\"call\": \"cuMemAlloc\", \"bytes\": %zu, \"ptr\": %llu}\n", bytesize, (unsigned long long)*dptr);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    memset((void *)(uintptr_t)dstDevice, uc, N);
    printf("{\"call\": \"cuMemsetD8\", \"ptr\": %llu, \"value\": %d, \"bytes\": %zu}\n",
           (unsigned long long)dstDevice, (int)uc, N);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    printf("{\"call\": \"cuCtxSynchronize\"}\n");
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    printf("{\"call\": \"cuMemFree\", \"ptr\": %llu}\n", (unsigned long long)dptr);
    free((void *)(uintptr_t)dptr);
    return CUDA_SUCCESS;
}

static void stub_print_u64s(const char *key, const cuuint64_t *v, unsigned n)
{
    unsigned i;
    printf(", \"%s\": [", key);
    for (i = 0; i < n; i++) {
        printf("%s%llu", i ? ", " : "", (unsigned long long)v[i]);
    }
    printf("]");
}

static void stub_print_u32s(const char *key, const cuuint32_t *v, unsigned n)
{
    unsigned i;
    printf(", \"%s\": [", key);
    for (i = 0; i < n; i++) {
        printf("%s%u", i ? ", " : "", (unsigned)v[i]);
    }
    printf("]");
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                        const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                        const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    memset(tensorMap, 0, sizeof(*tensorMap));
    tensorMap->opaque[0] = ++stub_maps;
    printf("{\"call\": \"cuTensorMapEncodeTiled\", \"map\": %llu, \"map_align\": %u, \"dtype\": %d, \"rank\": %u, "
           "\"address\": %llu", (unsigned long long)stub_maps, (unsigned)((uintptr_t)tensorMap % 128),
           (int)tensorDataType, (unsigned)tensorRank, (unsigned long long)(uintptr_t)globalAddress);
    stub_print_u64s("dims", globalDim, tensorRank);
    stub_print_u64s("strides", globalStrides, tensorRank - 1);
    stub_print_u32s("box", boxDim, tensorRank);
    stub_print_u32s("elem_strides", elementStrides, tensorRank);
    printf(", \"interleave\": %d, \"swizzle\": %d, \"l2\": %d, \"oob\": %d}\n", (int)interleave, (int)swizzle,
           (int)l2Promotion, (int)oobFill);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    size_t i, n = strlen(stub_param_kinds);
    printf("{\"call\": \"cuLaunchKernel\", \"function_ok\": %d, \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], "
           "\"smem\": %u, \"stream\": %llu, \"extra_null\": %d, \"params\": [",
           f == STUB_FUNCTION, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
           (unsigned long long)(uintptr_t)hStream, extra == NULL);
    for (i = 0; i < n; i++) {
        const void *p = kernelParams[i];
        printf("%s", i ? ", " : "");
        switch (stub_param_kinds[i]) {
        case 'm':
            printf("[\"map\", %llu, %u]", (unsigned long long)((const CUtensorMap *)p)->opaque[0],
                   (unsigned)((uintptr_t)p % 64));
            break;
        case 'p':
            printf("[\"pointer\", %llu]", (unsigned long long)*(const CUdeviceptr *)p);
            break;
        case 'i':
            printf("[\"i32\", %d]", (int)*(const int32_t *)p);
            break;
        case 'u':
            printf("[\"u32\", %u]", (unsigned)*(const uint32_t *)p);
            break;
        case 'l':
            printf("[\"i64\", %lld]", (long long)*(const int64_t *)p);
            break;
        case 'f':
            printf("[\"f32\", %.9g]", (double)*(const float *)p);
            break;
        default:
            printf("[\"unknown\", 0]");
        }
    }
    printf("]}\n");
    return CUDA_SUCCESS;
}
