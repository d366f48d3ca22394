/* The public C interface of KARMA (optional: LD_PRELOAD=libkarma.so works without it). */
#ifndef KARMA_KARMA_H_
#define KARMA_KARMA_H_

#define KARMA_VERSION_MAJOR 0
#define KARMA_VERSION_MINOR 1
#define KARMA_VERSION_PATCH 0

#endif /* KARMA_KARMA_H_ */
