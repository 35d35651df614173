// The registry of builtin filters by name.
#include <string_view>

#include "chat/filter_impl.h"

namespace hydragen::chat {

namespace {

constexpr Named<FilterFn> kFilters[] = {
    {"abs", filter_abs}, {"attr", filter_attr}, {"batch", filter_batch}, {"capitalize", filter_capitalize},
    {"center", filter_center}, {"count", filter_length}, {"d", filter_default}, {"default", filter_default},
    {"dictsort", filter_dictsort}, {"e", filter_escape}, {"escape", filter_escape}, {"first", filter_first},
    {"float", filter_float}, {"forceescape", filter_forceescape}, {"format", filter_format}, {"indent", filter_indent},
    {"int", filter_int}, {"items", filter_items}, {"join", filter_join}, {"last", filter_last},
    {"length", filter_length}, {"list", filter_list}, {"lower", filter_lower}, {"map", filter_map},
    {"max", filter_max}, {"min", filter_min}, {"reject", filter_reject}, {"rejectattr", filter_rejectattr},
    {"replace", filter_replace}, {"reverse", filter_reverse}, {"round", filter_round}, {"safe", filter_safe},
    {"select", filter_select}, {"selectattr", filter_selectattr}, {"slice", filter_slice}, {"sort", filter_sort},
    {"string", filter_string}, {"sum", filter_sum}, {"title", filter_title}, {"tojson", filter_tojson},
    {"trim", filter_trim}, {"unique", filter_unique}, {"upper", filter_upper},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  return find_named(kFilters, name);
}

}  // namespace hydragen::chat
