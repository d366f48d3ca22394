/* The public C interface of KARMA (optional: LD_PRELOAD=libkarma.so works without it). */
#ifndef KARMA_KARMA_H_
#define KARMA_KARMA_H_

#define KARMA_VERSION_MAJOR 0
#define KARMA_VERSION_MINOR 1
#define KARMA_VERSION_PATCH 0
#define KARMA_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the start of a training iteration. Once called, iterations are taken from these calls instead of being
   detected from the launch sequence; the iteration after KARMA_WARMUP_ITERATIONS marked ones is recorded.
   Exported by libkarma.so: an application that may run without it looks it up with
   dlsym(RTLD_DEFAULT, "karma_iteration_begin") and calls it only when found. */
void karma_iteration_begin(void);

/* The version of the loaded libkarma.so, "MAJOR.MINOR.PATCH". */
const char* karma_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KARMA_KARMA_H_ */
