// NVTX3 is header-only: its ranges reach a tool only through the injection interface. With
// NVTX_INJECTION64_PATH=libkarma.so, NVTX calls InitializeInjectionNvtx2 and range pushes come here, where the
// session looks for KARMA_ITERATION_MARKER.
#include <nvtx3/nvToolsExt.h>

#include "interpose/real.h"
#include "runtime/session/session.h"

namespace {

thread_local int t_depth = 0;

void Marker(const char* name) {
  if (karma::interpose::InHook()) return;
  karma::interpose::HookScope scope;
  if (karma::rt::Session* s = karma::rt::Session::Get()) s->OnRangePush(name);
}

int NVTX_API PushA(const char* message) {
  Marker(message);
  return t_depth++;
}

int NVTX_API PushEx(const nvtxEventAttributes_t* attributes) {
  if (attributes != nullptr && attributes->messageType == NVTX_MESSAGE_TYPE_ASCII) Marker(attributes->message.ascii);
  return t_depth++;
}

int NVTX_API Pop() { return t_depth > 0 ? --t_depth : -1; }

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  if (get == nullptr) return 0;
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->GetModuleFunctionTable == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) == 0 || table == nullptr ||
      size <= NVTX_CBID_CORE_RangePop) {
    return 0;
  }
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&PushA);
  *table[NVTX_CBID_CORE_RangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&PushEx);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&Pop);
  return 1;
}
