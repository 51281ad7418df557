#ifndef CALLING_BUILD_INFO_H
#define CALLING_BUILD_INFO_H

/// The git commit this binary was built from ("unknown" when the build did not record one).
const char *calling_build_commit(void);

#endif
