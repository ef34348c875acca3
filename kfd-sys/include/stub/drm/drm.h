/* Stand-in for <drm/drm.h>: Debian's linux-libc-dev does not ship the DRM
 * uapi headers, and kfd_ioctl.h only needs the basic kernel types from it. */
#ifndef KFDQ_STUB_DRM_H
#define KFDQ_STUB_DRM_H
#include <linux/types.h>
#endif
