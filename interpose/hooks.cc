// The hook table as data: names, libraries and lookup rules by hook id.
#include "interpose/hooks.h"

namespace karma::interpose {
namespace {

constexpr HookInfo kHooks[] = {
#define KARMA_HOOK_INFO(lib, ret, name, params, args, lookup) {HookId::name, #name, rt::CudaLib::lib, lookup},
    KARMA_HOOK_TABLE(KARMA_HOOK_INFO)
#undef KARMA_HOOK_INFO
};
static_assert(std::size(kHooks) == kHookCount);

}  // namespace

std::span<const HookInfo> Hooks() { return kHooks; }

}  // namespace karma::interpose
