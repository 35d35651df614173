// The builtin filters, shared between filters_text.cpp, filters_seq.cpp and the registry in
// builtins.cpp. Each is jinja2's filter of the same name, as transformers configures it.
#pragma once

#include "chat/builtins.h"

namespace hydragen::chat {

// jinja2's make_attrgetter: `attribute` is an int or a dotted path ("a.b.0"), each part looked
// up with getitem-then-getattr.
Value attr_path(const Value& item, const Value& attribute);
// soft_str: a str (Markup stays Markup) of v.
Value soft_str(const Value& v);

#define HYDRAGEN_FILTER(name) Value name(Renderer& r, const Value& input, const Args& args)
// text
HYDRAGEN_FILTER(filter_abs);
HYDRAGEN_FILTER(filter_capitalize);
HYDRAGEN_FILTER(filter_center);
HYDRAGEN_FILTER(filter_escape);
HYDRAGEN_FILTER(filter_float);
HYDRAGEN_FILTER(filter_forceescape);
HYDRAGEN_FILTER(filter_format);
HYDRAGEN_FILTER(filter_indent);
HYDRAGEN_FILTER(filter_int);
HYDRAGEN_FILTER(filter_lower);
HYDRAGEN_FILTER(filter_replace);
HYDRAGEN_FILTER(filter_round);
HYDRAGEN_FILTER(filter_safe);
HYDRAGEN_FILTER(filter_string);
HYDRAGEN_FILTER(filter_title);
HYDRAGEN_FILTER(filter_tojson);
HYDRAGEN_FILTER(filter_trim);
HYDRAGEN_FILTER(filter_upper);
// sequences
HYDRAGEN_FILTER(filter_attr);
HYDRAGEN_FILTER(filter_batch);
HYDRAGEN_FILTER(filter_default);
HYDRAGEN_FILTER(filter_dictsort);
HYDRAGEN_FILTER(filter_first);
HYDRAGEN_FILTER(filter_items);
HYDRAGEN_FILTER(filter_join);
HYDRAGEN_FILTER(filter_last);
HYDRAGEN_FILTER(filter_length);
HYDRAGEN_FILTER(filter_list);
HYDRAGEN_FILTER(filter_map);
HYDRAGEN_FILTER(filter_max);
HYDRAGEN_FILTER(filter_min);
HYDRAGEN_FILTER(filter_reject);
HYDRAGEN_FILTER(filter_rejectattr);
HYDRAGEN_FILTER(filter_reverse);
HYDRAGEN_FILTER(filter_select);
HYDRAGEN_FILTER(filter_selectattr);
HYDRAGEN_FILTER(filter_slice);
HYDRAGEN_FILTER(filter_sort);
HYDRAGEN_FILTER(filter_sum);
HYDRAGEN_FILTER(filter_unique);
#undef HYDRAGEN_FILTER

}  // namespace hydragen::chat
