#include "allocator/preload/loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "allocator/preload/charge.h"
#include "allocator/preload/nvml.h"
#include "core/base/shm.h"  // Printable

extern "C" {
__attribute__((visibility("hidden"))) void* (*cm_real_dlopen)(const char*, int) = nullptr;
__attribute__((visibility("hidden"))) void* (*cm_real_dlmopen)(Lmid_t, const char*, int) = nullptr;
// Set once the interposer is active: only then are RTLD_DEEPBIND loads handled here.
__attribute__((visibility("hidden"))) int cm_loader_active = 0;
__attribute__((visibility("hidden"))) void* cm_dlopen_hook(const char* file, int mode,
                                                           void* caller);
__attribute__((visibility("hidden"))) void cm_dlmopen_note(Lmid_t lmid, const char* file);
__attribute__((visibility("hidden"))) void* cm_dlmopen_early(Lmid_t lmid, const char* file,
                                                             int mode);
// The interposer's own dlsym, dlopen and dlmopen, by hidden names of the same addresses.
__attribute__((visibility("hidden"))) void cm_dlsym_self();
__attribute__((visibility("hidden"))) void cm_dlopen_self();
__attribute__((visibility("hidden"))) void cm_dlmopen_self();
}

#if defined(__x86_64__)
// dlopen and dlmopen, like dlsym (interpose.cc), reach glibc's by a jump that keeps the caller's
// return address: glibc searches the caller's RUNPATH and loads into the caller's namespace. Only a
// load with RTLD_DEEPBIND (0x8) while the interposer is active is handled in C, which must then
// search as glibc would for that caller (cm_dlopen_hook gets its return address).
asm(R"(
  .text
  .globl dlopen
  .globl cm_dlopen_self
  .hidden cm_dlopen_self
  .type dlopen, @function
dlopen:
cm_dlopen_self:
  testl $8, %esi
  jz 1f
  cmpl $0, cm_loader_active(%rip)
  je 1f
  movq (%rsp), %rdx
  jmp cm_dlopen_hook
1:
  movq cm_real_dlopen(%rip), %rax
  testq %rax, %rax
  jz 2f
  jmp *%rax
2:
  xorq %rdx, %rdx
  jmp cm_dlopen_hook
  .size dlopen, .-dlopen

  .globl dlmopen
  .globl cm_dlmopen_self
  .hidden cm_dlmopen_self
  .type dlmopen, @function
dlmopen:
cm_dlmopen_self:
  testq %rdi, %rdi
  jz 1f
  cmpl $0, cm_loader_active(%rip)
  je 1f
  pushq %rdi
  pushq %rsi
  pushq %rdx
  call cm_dlmopen_note
  popq %rdx
  popq %rsi
  popq %rdi
1:
  movq cm_real_dlmopen(%rip), %rax
  testq %rax, %rax
  jz cm_dlmopen_early
  jmp *%rax
  .size dlmopen, .-dlmopen
)");
#endif

using namespace cm::preload;

namespace {

template <typename F>
F Versioned(const char* name, const char* v1, const char* v2) {
  void* f = dlvsym(RTLD_NEXT, name, v1);
  if (!f) f = dlvsym(RTLD_NEXT, name, v2);
  return reinterpret_cast<F>(f);
}

void ResolveLoader() {
  if (!cm_real_dlopen)
    cm_real_dlopen = Versioned<void* (*)(const char*, int)>("dlopen", "GLIBC_2.34", "GLIBC_2.2.5");
  if (!cm_real_dlmopen)
    cm_real_dlmopen =
        Versioned<void* (*)(Lmid_t, const char*, int)>("dlmopen", "GLIBC_2.34", "GLIBC_2.3.4");
}

// The names a module's slots are bound to here: every wrapped entry point, and the lookups that
// hand them out.
void* Replacement(const char* name) {
  if (name[0] == 'd') {
#if defined(__x86_64__)
    if (!std::strcmp(name, "dlsym")) return reinterpret_cast<void*>(&cm_dlsym_self);
    if (!std::strcmp(name, "dlopen")) return reinterpret_cast<void*>(&cm_dlopen_self);
    if (!std::strcmp(name, "dlmopen")) return reinterpret_cast<void*>(&cm_dlmopen_self);
#endif
    return nullptr;
  }
  if (name[0] == 'n') return NvmlWrapperNamed(name);
  if (name[0] != 'c' || name[1] != 'u') return nullptr;
  for (int i = 0; i < kWrapped; ++i)
    if (!std::strcmp(name, kNames[i])) return Wrapper(static_cast<Fn>(i));
  return nullptr;
}

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT, kAbs = R_X86_64_64;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT,
                   kAbs = R_AARCH64_ABS64;
#endif

struct Patched {
  int slots = 0;
  std::string failure;  // why a slot could not be written, if one could not
};

// Writes `value` into the slot at `where`, which may lie in the module's read-only part after
// relocation (RELRO): made writable for the write, then read-only again.
bool WriteSlot(void** where, void* value, uintptr_t relro_start, uintptr_t relro_end) {
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t a = reinterpret_cast<uintptr_t>(where);
  uintptr_t start = a & ~static_cast<uintptr_t>(page - 1);
  size_t len = (a + sizeof(void*) - start + page - 1) & ~static_cast<size_t>(page - 1);
  bool relro = a >= relro_start && a < relro_end;
  if (relro && mprotect(reinterpret_cast<void*>(start), len, PROT_READ | PROT_WRITE) != 0)
    return false;
  __atomic_store_n(where, value, __ATOMIC_RELEASE);
  if (relro) mprotect(reinterpret_cast<void*>(start), len, PROT_READ);
  return true;
}

// Binds the slots of one loaded module that refer to a wrapped name (one it does not define) to
// the wrapper.
Patched PatchModule(const dl_phdr_info* info) {
  Patched out;
#if defined(__x86_64__) || defined(__aarch64__)
  const ElfW(Dyn)* dyn = nullptr;
  uintptr_t relro_start = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + ph.p_vaddr);
    if (ph.p_type == PT_GNU_RELRO) {
      relro_start = info->dlpi_addr + ph.p_vaddr;
      relro_end = relro_start + ph.p_memsz;
    }
  }
  if (!dyn) return out;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)* rela = nullptr;
  const ElfW(Rela)* jmprel = nullptr;
  size_t rela_size = 0, jmprel_size = 0;
  bool plt_rela = true;
  // The loader relocates these addresses in place in most modules; where it does not, they are
  // offsets from the module's base.
  auto at = [&](ElfW(Addr) p) { return p < info->dlpi_addr ? info->dlpi_addr + p : p; };
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        symtab = reinterpret_cast<const ElfW(Sym)*>(at(d->d_un.d_ptr));
        break;
      case DT_STRTAB:
        strtab = reinterpret_cast<const char*>(at(d->d_un.d_ptr));
        break;
      case DT_RELA:
        rela = reinterpret_cast<const ElfW(Rela)*>(at(d->d_un.d_ptr));
        break;
      case DT_RELASZ:
        rela_size = d->d_un.d_val;
        break;
      case DT_JMPREL:
        jmprel = reinterpret_cast<const ElfW(Rela)*>(at(d->d_un.d_ptr));
        break;
      case DT_PLTRELSZ:
        jmprel_size = d->d_un.d_val;
        break;
      case DT_PLTREL:
        plt_rela = d->d_un.d_val == DT_RELA;
        break;
      default:
        break;
    }
  }
  if (!symtab || !strtab) return out;
  auto walk = [&](const ElfW(Rela) * r, size_t bytes) {
    for (size_t i = 0; r && i < bytes / sizeof(ElfW(Rela)); ++i) {
      uint32_t type = ELF64_R_TYPE(r[i].r_info);
      if (type != kJumpSlot && type != kGlobDat && type != kAbs) continue;
      const ElfW(Sym)& s = symtab[ELF64_R_SYM(r[i].r_info)];
      if (s.st_shndx != SHN_UNDEF || !s.st_name) continue;
      void* to = Replacement(strtab + s.st_name);
      if (!to) continue;
      if (type == kAbs) to = static_cast<char*>(to) + r[i].r_addend;
      void** slot = reinterpret_cast<void**>(info->dlpi_addr + r[i].r_offset);
      if (*slot == to) continue;
      if (WriteSlot(slot, to, relro_start, relro_end))
        ++out.slots;
      else if (out.failure.empty())
        out.failure = std::string("its slot for ") + (strtab + s.st_name) +
                      " could not be made writable (" + std::strerror(errno) + ")";
    }
  };
  walk(rela, rela_size);
  if (plt_rela)
    walk(jmprel, jmprel_size);
  else if (jmprel_size && out.failure.empty())
    out.failure = "its relocations are not of a kind read here";
#else
  out.failure = "modules are not bound on this processor";
#endif
  return out;
}

std::mutex g_loader_mutex;  // one RTLD_DEEPBIND load handled at a time

// A loaded module, by its base and program headers (the main program's base is 0).
using ModuleKey = std::pair<uintptr_t, uintptr_t>;
ModuleKey KeyOf(const dl_phdr_info* info) {
  return {info->dlpi_addr, reinterpret_cast<uintptr_t>(info->dlpi_phdr)};
}

int CollectModule(dl_phdr_info* info, size_t, void* data) {
  static_cast<std::set<ModuleKey>*>(data)->insert(KeyOf(info));
  return 0;
}

struct NewModules {
  const std::set<ModuleKey>* before;
  std::vector<std::string> failures;
  int slots = 0;
};

int PatchNew(dl_phdr_info* info, size_t, void* data) {
  auto* n = static_cast<NewModules*>(data);
  if (n->before->count(KeyOf(info))) return 0;
  Patched p = PatchModule(info);
  n->slots += p.slots;
  if (!p.failure.empty())
    n->failures.push_back(std::string(info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "?") +
                          ": " + p.failure);
  return 0;
}

// `file` found as glibc finds it for `caller`: a loaded module of that name first, then in the
// caller's search path (its RPATH or RUNPATH, LD_LIBRARY_PATH, the system's folders), which the
// loader reports for it (RTLD_DI_SERINFO); what is found nowhere is left to dlopen as is (the
// loader's cache).
std::string Locate(const char* file, void* caller) {
  if (!file || std::strchr(file, '/')) return file ? file : "";
  if (void* h = cm_real_dlopen(file, RTLD_LAZY | RTLD_NOLOAD)) {
    dlclose(h);
    return file;
  }
  Dl_info info;
  link_map* lm = nullptr;
  if (!caller || !dladdr1(caller, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) || !lm)
    return file;
  void* self =
      cm_real_dlopen(lm->l_name && *lm->l_name ? lm->l_name : nullptr, RTLD_LAZY | RTLD_NOLOAD);
  if (!self) return file;
  std::string found = file;
  Dl_serinfo size;
  if (dlinfo(self, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof(Dl_serinfo)) {
    std::vector<char> buf(size.dls_size);
    auto* si = reinterpret_cast<Dl_serinfo*>(buf.data());
    si->dls_size = size.dls_size;
    si->dls_cnt = size.dls_cnt;
    if (dlinfo(self, RTLD_DI_SERINFOSIZE, si) == 0 && dlinfo(self, RTLD_DI_SERINFO, si) == 0) {
      for (unsigned i = 0; i < si->dls_cnt; ++i) {
        std::string candidate = std::string(si->dls_serpath[i].dls_name) + "/" + file;
        if (access(candidate.c_str(), R_OK) == 0) {
          found = candidate;
          break;
        }
      }
    }
  }
  dlclose(self);
  return found;
}

}  // namespace

namespace cm::preload {

void LoaderInit() {
  ResolveLoader();
  cm_loader_active = Active() ? 1 : 0;
}

}  // namespace cm::preload

extern "C" void* cm_dlopen_hook(const char* file, int mode, void* caller) {
  ResolveLoader();
  if (!cm_real_dlopen) return nullptr;
  if (!(mode & RTLD_DEEPBIND) || !cm_loader_active) return cm_real_dlopen(file, mode);
  std::lock_guard<std::mutex> lock(g_loader_mutex);
  std::set<ModuleKey> before;
  dl_iterate_phdr(CollectModule, &before);
  std::string path = Locate(file, caller);
  void* h = cm_real_dlopen(file ? path.c_str() : nullptr, mode);
  if (!h) return h;
  NewModules n{&before, {}, 0};
  dl_iterate_phdr(PatchNew, &n);
  for (const std::string& f : n.failures)
    Member::Get().FailOpen("ERR_PRELOAD_MODULE",
                           "the module " + cm::core::shm::Printable(f) +
                               " (loaded with RTLD_DEEPBIND) could not be bound to the "
                               "interposer; the memory it takes through the driver is not charged",
                           0, GroupDevice());
  return h;
}

extern "C" void cm_dlmopen_note(Lmid_t lmid, const char* file) {
  Member::Get().FailOpen(
      "ERR_PRELOAD_MODULE",
      std::string("a module (") + cm::core::shm::Printable(file ? file : "?") +
          ") was loaded into another link-map namespace (dlmopen), where the interposer cannot "
          "reach it; the memory it takes is not charged",
      0, GroupDevice());
  (void)lmid;
}

extern "C" void* cm_dlmopen_early(Lmid_t lmid, const char* file, int mode) {
  ResolveLoader();
  return cm_real_dlmopen ? cm_real_dlmopen(lmid, file, mode) : nullptr;
}
