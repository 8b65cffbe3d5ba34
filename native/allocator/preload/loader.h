// Modules that would bind past the interposer: one loaded with RTLD_DEEPBIND looks up its symbols
// in its own dependencies first (the driver, libc's dlsym), so its references to the entry points
// the interposer wraps (and to dlsym, dlopen and dlmopen) are bound to the wrappers once it is
// loaded, by writing its relocated slots. One loaded into another link-map namespace (dlmopen)
// cannot be reached at all: that is said on stderr and recorded beside the ledger.
#pragma once

namespace cm::preload {

// Resolves the real dlopen and dlmopen (from the constructor).
void LoaderInit();

}  // namespace cm::preload
