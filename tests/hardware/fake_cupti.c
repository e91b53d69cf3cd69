/* A stand-in for libcupti's PM sampling and Profiler Host calls, for CPU tests of
 * pytest_gpuutil/hardware/cupti_pm.py (tests/hardware/test_pm_source.py builds it with cc).
 *
 * The parameter structs follow CUPTI 13.0's headers as pm_structs.py does (LP64). Samples are
 * known functions of their global index g: [t0 + g*period, t0 + (g+1)*period) on the wall clock
 * (t0: cuptiPmSamplingStart), metric m evaluates to (g*7 + m*13) % 100 + 0.5. fake_arrive(n)
 * makes n samples wait in the "hardware buffer"; DecodeData moves what fits into the counter data
 * image (stop reason 1, COUNTER_DATA_FULL, when some are left). The first sample of an image
 * initialised after the first has a garbage start (after its end), as on an H100.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

typedef struct { size_t structSize; void *pPriv; } Plain;
typedef struct { size_t structSize; void *pPriv; size_t deviceIndex; const char *pChipName; } ChipName;
typedef struct { size_t structSize; void *pPriv; size_t deviceIndex; size_t size; uint8_t *p; } Availability;
typedef struct { size_t structSize; void *pPriv; int type; const char *chip; uint8_t *avail; void *host; } HostInit;
typedef struct { size_t structSize; void *pPriv; void *host; } HostOnly;
typedef struct { size_t structSize; void *pPriv; void *host; const char **names; size_t n; } AddMetrics;
typedef struct { size_t structSize; void *pPriv; void *host; size_t size; } ImageSize;
typedef struct { size_t structSize; void *pPriv; void *host; size_t size; uint8_t *p; } Image;
typedef struct { size_t structSize; void *pPriv; size_t size; uint8_t *p; size_t passes; } Passes;
typedef struct { size_t structSize; void *pPriv; size_t deviceIndex; void *obj; } Enable;
typedef struct { size_t structSize; void *pPriv; void *obj; } Object;
typedef struct { size_t structSize; void *pPriv; void *obj; size_t configSize; uint8_t *config; size_t hwSize;
                 uint64_t interval; int trigger; int append; } SetConfig;
typedef struct { size_t structSize; void *pPriv; void *obj; const char **names; size_t n; uint32_t maxSamples;
                 size_t size; } DataSize;
typedef struct { size_t structSize; void *pPriv; void *obj; size_t size; uint8_t *p; } DataInit;
typedef struct { size_t structSize; void *pPriv; void *obj; uint8_t *image; size_t size; int stop; uint8_t overflow; } Decode;
typedef struct { size_t structSize; void *pPriv; uint8_t *image; size_t size; size_t total; size_t populated;
                 size_t completed; } DataInfo;
typedef struct { size_t structSize; void *pPriv; void *obj; uint8_t *image; size_t size; size_t index; uint64_t start;
                 uint64_t end; } SampleInfo;
typedef struct { size_t structSize; void *pPriv; void *host; uint8_t *image; size_t size; size_t index;
                 const char **names; size_t n; double *values; } Evaluate;

/* the counter data image: this header, then nothing (values are functions of the index) */
typedef struct { uint64_t capacity, count, first; } Header;

static uint64_t t0, period = 1000000, next_global, pending;
static size_t added;
static int overflow_next;
int fake_decodes, fake_one_pass_metrics = 6, fake_enable_result;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void fake_reset(void) { next_global = pending = 0; fake_decodes = 0; overflow_next = 0; fake_enable_result = 0; }
void fake_refuse_enable(int result) { fake_enable_result = result; }
void fake_arrive(uint64_t n) { pending += n; }
void fake_overflow(void) { overflow_next = 1; }
uint64_t fake_next_global(void) { return next_global; }
uint64_t fake_t0(void) { return t0; }

int cuptiGetResultString(int result, const char **text) { (void)result; *text = "fake CUPTI error"; return 0; }
int cuptiGetTimestamp(uint64_t *stamp) { *stamp = now_ns(); return 0; }
int cuptiProfilerInitialize(Plain *p) { (void)p; return 0; }
int cuptiDeviceGetChipName(ChipName *p) { p->pChipName = "GH100"; return 0; }
int cuptiPmSamplingGetCounterAvailability(Availability *p) {
    if (p->p) memset(p->p, 1, p->size); else p->size = 64;
    return 0;
}
int cuptiProfilerHostInitialize(HostInit *p) { p->host = (void *)1; added = 0; return 0; }
int cuptiProfilerHostDeinitialize(HostOnly *p) { (void)p; return 0; }
int cuptiProfilerHostConfigAddMetrics(AddMetrics *p) {
    for (size_t i = 0; i < p->n; i++)
        if (strstr(p->names[i], "hmma")) return 1;  /* not on this chip */
    added += p->n;
    return 0;
}
int cuptiProfilerHostGetConfigImageSize(ImageSize *p) { p->size = 16; return 0; }
int cuptiProfilerHostGetConfigImage(Image *p) { memset(p->p, 0, p->size); p->p[0] = (uint8_t)added; return 0; }
int cuptiProfilerHostGetNumOfPasses(Passes *p) { p->passes = p->p[0] > fake_one_pass_metrics ? 2 : 1; return 0; }
int cuptiPmSamplingEnable(Enable *p) { p->obj = (void *)2; return fake_enable_result; }
int cuptiPmSamplingDisable(Object *p) { (void)p; return 0; }
int cuptiPmSamplingSetConfig(SetConfig *p) { period = p->interval; return 0; }
int cuptiPmSamplingGetCounterDataSize(DataSize *p) { p->size = sizeof(Header) + 8u * p->maxSamples; return 0; }
int cuptiPmSamplingCounterDataImageInitialize(DataInit *p) {
    Header *h = (Header *)p->p;
    h->capacity = (p->size - sizeof(Header)) / 8u;
    h->count = 0;
    h->first = next_global;
    return 0;
}
int cuptiPmSamplingStart(Object *p) { (void)p; t0 = now_ns(); return 0; }
int cuptiPmSamplingStop(Object *p) { (void)p; return 0; }
int cuptiPmSamplingDecodeData(Decode *p) {
    Header *h = (Header *)p->image;
    uint64_t room = h->capacity - h->count, take = pending < room ? pending : room;
    fake_decodes++;
    h->count += take;
    pending -= take;
    next_global = h->first + h->count;
    p->stop = pending ? 1 : 2;
    p->overflow = (uint8_t)overflow_next;
    overflow_next = 0;
    return 0;
}
int cuptiPmSamplingGetCounterDataInfo(DataInfo *p) {
    Header *h = (Header *)p->image;
    p->total = h->capacity;
    p->populated = p->completed = h->count;
    return 0;
}
int cuptiPmSamplingCounterDataGetSampleInfo(SampleInfo *p) {
    Header *h = (Header *)p->image;
    if (p->index >= h->count) return 1;
    uint64_t g = h->first + p->index;
    p->start = t0 + g * period;
    p->end = p->start + period;
    if (p->index == 0 && h->first > 0) p->start = p->end + 1;  /* garbage, as on an H100 */
    return 0;
}
int cuptiProfilerHostEvaluateToGpuValues(Evaluate *p) {
    Header *h = (Header *)p->image;
    uint64_t g = h->first + p->index;
    for (size_t m = 0; m < p->n; m++) p->values[m] = (double)((g * 7 + m * 13) % 100) + 0.5;
    return 0;
}
