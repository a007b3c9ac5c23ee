// A libcuda.so whose every entry point returns at once, for measuring the
// host side of tensorfn's GPU calls on a machine without a GPU (see
// scripts/host-overhead). It answers with one device of compute capability
// 9.0 and 132 multiprocessors, hands out increasing fake addresses, runs
// nothing and copies nothing: only what tensorfn itself does is left to time.
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
typedef int CUresult;
static uint64_t next_ptr = 0x100000000ull;
#define OK return 0
CUresult cuInit(unsigned f){OK;}
CUresult cuDriverGetVersion(int*v){*v=13000;OK;}
CUresult cuDeviceGetCount(int*c){*c=1;OK;}
CUresult cuDeviceGet(int*d,int o){*d=o;OK;}
CUresult cuDeviceGetName(char*n,int len,int d){strncpy(n,"stub",len);OK;}
CUresult cuDeviceGetAttribute(int*v,int a,int d){*v = a==75?9: a==76?0: a==16?132: 1; OK;}
CUresult cuDevicePrimaryCtxRetain(void**c,int d){*c=(void*)1;OK;}
CUresult cuCtxSetCurrent(void*c){OK;}
CUresult cuCtxGetCurrent(void**c){*c=(void*)1;OK;}
CUresult cuStreamCreate(void**s,unsigned f){*s=(void*)2;OK;}
CUresult cuStreamDestroy_v2(void*s){OK;}
CUresult cuStreamSynchronize(void*s){OK;}
CUresult cuStreamWaitEvent(void*s,void*e,unsigned f){OK;}
CUresult cuMemGetInfo_v2(size_t*f,size_t*t){*f=70ull<<30;*t=80ull<<30;OK;}
CUresult cuMemAlloc_v2(uint64_t*p,size_t n){*p=next_ptr; next_ptr+=(n+4095)&~4095ull; OK;}
CUresult cuMemFree_v2(uint64_t p){OK;}
CUresult cuMemcpyHtoD_v2(uint64_t d,const void*s,size_t n){OK;}
CUresult cuMemcpyHtoDAsync_v2(uint64_t d,const void*s,size_t n,void*st){OK;}
CUresult cuMemcpyDtoH_v2(void*d,uint64_t s,size_t n){OK;}
CUresult cuMemcpyDtoHAsync_v2(void*d,uint64_t s,size_t n,void*st){OK;}
CUresult cuMemsetD8Async(uint64_t d,unsigned char v,size_t n,void*s){OK;}
CUresult cuMemsetD16Async(uint64_t d,unsigned short v,size_t n,void*s){OK;}
CUresult cuMemsetD32Async(uint64_t d,unsigned v,size_t n,void*s){OK;}
CUresult cuMemHostAlloc(void**p,size_t n,unsigned f){*p=malloc(n);OK;}
CUresult cuMemAllocHost_v2(void**p,size_t n){*p=malloc(n);OK;}
CUresult cuMemFreeHost(void*p){free(p);OK;}
CUresult cuMemHostRegister_v2(void*p,size_t n,unsigned f){OK;}
CUresult cuMemHostUnregister(void*p){OK;}
CUresult cuModuleLoadDataEx(void**m,const void*i,unsigned n,void*o,void*v){*m=(void*)3;OK;}
CUresult cuModuleLoadData(void**m,const void*i){*m=(void*)3;OK;}
CUresult cuModuleGetFunction(void**f,void*m,const char*n){*f=(void*)4;OK;}
CUresult cuLaunchKernel(void*f,unsigned a,unsigned b,unsigned c,unsigned d,unsigned e,unsigned g,unsigned sm,void*s,void**p,void**x){OK;}
CUresult cuEventCreate(void**e,unsigned f){*e=(void*)5;OK;}
CUresult cuEventDestroy_v2(void*e){OK;}
CUresult cuEventRecord(void*e,void*s){OK;}
CUresult cuEventSynchronize(void*e){OK;}
CUresult cuEventElapsedTime_v2(float*ms,void*a,void*b){*ms=1.0f;OK;}
CUresult cuEventElapsedTime(float*ms,void*a,void*b){*ms=1.0f;OK;}
CUresult cuGetErrorString(int e,const char**s){*s="stub";OK;}
CUresult cuGetErrorName(int e,const char**s){*s="stub";OK;}
