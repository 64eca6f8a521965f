#include "engine/cache/sequence_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/cache/staging_layout.h"

namespace pdspark::engine {
namespace {

constexpr char kMagic[8] = {'P', 'D', 'S', 'S', 'E', 'Q', '0', '1'};

void PutInt(std::string& out, int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

bool GetInt(std::string_view in, size_t& offset, int64_t& v) {
  if (offset + sizeof(v) > in.size()) return false;
  std::memcpy(&v, in.data() + offset, sizeof(v));
  offset += sizeof(v);
  return true;
}

// One group of SequenceState::ExtendForTransfer.
Status ExtendGroupForTransfer(PagedRows& rows, const SequenceState::GroupRows& target,
                              int64_t ship_from) {
  if (ship_from == target.first_row) return rows.Assign(target.first_row, target.size, nullptr);
  if (ship_from < target.first_row || ship_from > target.size ||
      ship_from % rows.rows_per_page() != 0 || rows.size() < ship_from ||
      rows.first_row() > target.first_row) {
    return absl::InternalError(absl::StrCat("cached rows [", rows.first_row(), ", ", rows.size(),
                                            ") cannot keep [", target.first_row, ", ", ship_from,
                                            ") of a transfer filling rows up to ", target.size));
  }
  rows.Truncate(ship_from);
  RETURN_IF_ERROR(rows.Extend(target.size));
  rows.ReleaseBelow(target.first_row);
  return absl::OkStatus();
}

}  // namespace

SequenceState::SequenceState(const CacheLayout* layout, KvPool* pool) : layout_(layout) {
  groups_.resize(layout->layers.size());
  for (size_t l = 0; l < layout->layers.size(); ++l) {
    for (const auto& spec : layout->layers[l].groups) {
      groups_[l].emplace_back(&pool->ForGroup(spec.name, spec.row_bytes), spec.fp8);
    }
  }
}

StatusOr<std::unique_ptr<SequenceState>> SequenceState::Fork(PageHolder holder,
                                                             bool own_last_pages) {
  std::unique_ptr<SequenceState> fork(new SequenceState(layout_));
  fork->groups_.resize(groups_.size());
  for (size_t l = 0; l < groups_.size(); ++l) {
    for (PagedRows& rows : groups_[l]) {
      ASSIGN_OR_RETURN(PagedRows copy, rows.Fork(holder, own_last_pages));
      fork->groups_[l].push_back(std::move(copy));
    }
  }
  fork->num_tokens_ = num_tokens_;
  return fork;
}

bool SequenceState::HoldsRowsOfAFreshState(std::span<const int64_t> keep_rows_from) const {
  size_t flat = 0;
  for (size_t l = 0; l < groups_.size(); ++l) {
    const auto& specs = layout_->layers[l].groups;
    for (size_t g = 0; g < specs.size(); ++g, ++flat) {
      const PagedRows& rows = groups_[l][g];
      const int64_t per_page = rows.rows_per_page();
      int64_t first = RetainedFirstRow(specs[g], num_tokens_, per_page);
      if (flat < keep_rows_from.size()) {
        first = std::min(first, keep_rows_from[flat] / per_page * per_page);
      }
      if (rows.size() != num_tokens_ / specs[g].tokens_per_row) return false;
      if (rows.first_row() > first) return false;
    }
  }
  return true;
}

int64_t SequenceState::PagesToGrow(int64_t count) const {
  const int64_t tokens = num_tokens_ + count;
  int64_t pages = 0;
  for (size_t l = 0; l < groups_.size(); ++l) {
    const auto& specs = layout_->layers[l].groups;
    for (size_t g = 0; g < specs.size(); ++g) {
      const int64_t per_row = specs[g].tokens_per_row;
      pages += groups_[l][g].PagesToGrow((tokens + per_row - 1) / per_row);
    }
  }
  return pages;
}

PagedRows& SequenceState::Group(int64_t layer, CacheGroupKind kind) {
  return groups_[layer][layout_->layers[layer].Find(kind)];
}

const PagedRows& SequenceState::Group(int64_t layer, CacheGroupKind kind) const {
  return groups_[layer][layout_->layers[layer].Find(kind)];
}

void SequenceState::ReserveTokens(int64_t count) {
  for (size_t l = 0; l < groups_.size(); ++l) {
    const auto& specs = layout_->layers[l].groups;
    for (size_t g = 0; g < specs.size(); ++g) {
      const int64_t rows = (num_tokens_ + count) / specs[g].tokens_per_row;
      while (groups_[l][g].size() < rows) groups_[l][g].Append();
    }
  }
}

void SequenceState::DropReservedRows() { TruncateRows(num_tokens_); }

void SequenceState::TruncateRows(int64_t position) {
  for (size_t l = 0; l < groups_.size(); ++l) {
    const auto& specs = layout_->layers[l].groups;
    for (size_t g = 0; g < specs.size(); ++g) {
      groups_[l][g].Truncate(position / specs[g].tokens_per_row);
    }
  }
}

void SequenceState::CommitTokens(int64_t count) {
  num_tokens_ += count;
  size_t flat = 0;
  for (size_t l = 0; l < groups_.size(); ++l) {
    const auto& specs = layout_->layers[l].groups;
    for (size_t g = 0; g < specs.size(); ++g, ++flat) {
      if (specs[g].keep_tokens <= 0) continue;
      const int64_t keep_from = num_tokens_ - specs[g].keep_tokens;
      if (keep_from <= 0) continue;
      int64_t row = keep_from / specs[g].tokens_per_row;
      if (flat < keep_rows_from_.size()) row = std::min(row, keep_rows_from_[flat]);
      groups_[l][g].ReleaseBelow(row);
    }
  }
}

Status SequenceState::Truncate(int64_t position) {
  if (position < 0 || position > num_tokens_) {
    return absl::OutOfRangeError(
        absl::StrCat("truncate to ", position, " outside [0, ", num_tokens_, "]"));
  }
  // Continuing from `position` needs, per group, the rows covering the last keep_tokens
  // tokens minus the rollback allowance.
  for (size_t l = 0; l < groups_.size(); ++l) {
    const auto& specs = layout_->layers[l].groups;
    for (size_t g = 0; g < specs.size(); ++g) {
      if (specs[g].keep_tokens <= 0) continue;
      const int64_t need_tokens = specs[g].keep_tokens - layout_->max_rollback_tokens;
      const int64_t need_from = std::max<int64_t>(0, position - need_tokens);
      if (groups_[l][g].first_row() * specs[g].tokens_per_row > need_from) {
        return absl::FailedPreconditionError(
            absl::StrCat("truncate to ", position, ": layer ", l, " ", specs[g].name,
                         " already released rows below ", groups_[l][g].first_row(),
                         " (max_rollback_tokens=", layout_->max_rollback_tokens, ")"));
      }
    }
  }
  TruncateRows(position);
  num_tokens_ = position;
  return absl::OkStatus();
}

std::string SequenceState::Serialize() const {
  std::string out(kMagic, sizeof(kMagic));
  PutInt(out, num_tokens_);
  PutInt(out, static_cast<int64_t>(groups_.size()));
  for (size_t l = 0; l < groups_.size(); ++l) {
    PutInt(out, static_cast<int64_t>(groups_[l].size()));
    for (const PagedRows& rows : groups_[l]) {
      PutInt(out, rows.row_bytes());
      rows.AppendTo(out);
    }
  }
  return out;
}

Status SequenceState::Restore(std::string_view in) {
  if (in.size() < sizeof(kMagic) || std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("cache snapshot: bad magic");
  }
  size_t offset = sizeof(kMagic);
  int64_t tokens = 0, layers = 0;
  if (!GetInt(in, offset, tokens) || !GetInt(in, offset, layers) ||
      layers != static_cast<int64_t>(groups_.size())) {
    return absl::DataLossError("cache snapshot: layer count differs from this model");
  }
  std::vector<GroupRows> views;
  for (size_t l = 0; l < groups_.size(); ++l) {
    int64_t n = 0;
    if (!GetInt(in, offset, n) || n != static_cast<int64_t>(groups_[l].size())) {
      return absl::DataLossError(absl::StrCat("cache snapshot: layer ", l, " group count differs"));
    }
    for (const PagedRows& rows : groups_[l]) {
      int64_t row_bytes = 0;
      GroupRows view;
      if (!GetInt(in, offset, row_bytes) || row_bytes != rows.row_bytes()) {
        return absl::DataLossError(absl::StrCat("cache snapshot: layer ", l,
                                                " row size differs (another --kv-cache-dtype?)"));
      }
      if (!GetInt(in, offset, view.first_row) || !GetInt(in, offset, view.size) ||
          view.first_row < 0 || view.first_row > view.size) {
        return absl::DataLossError("cache snapshot: bad row-group header");
      }
      const uint64_t row_size = static_cast<uint64_t>(row_bytes);
      const uint64_t count = static_cast<uint64_t>(view.size - view.first_row);
      if (count > (in.size() - offset) / row_size) {
        return absl::DataLossError(
            absl::StrCat("cache snapshot: truncated rows (need ", count * row_size, " bytes)"));
      }
      const uint64_t bytes = count * row_size;
      view.data = in.data() + offset;
      offset += bytes;
      views.push_back(view);
    }
  }
  if (offset != in.size()) return absl::DataLossError("cache snapshot: trailing bytes");
  return RestoreRows(tokens, views);
}

size_t SequenceState::NumGroups() const {
  size_t groups = 0;
  for (const auto& layer : groups_) groups += layer.size();
  return groups;
}

Status SequenceState::RestoreRows(int64_t num_tokens, std::span<const GroupRows> groups) {
  const size_t expected = NumGroups();
  if (groups.size() != expected) {
    return absl::DataLossError(absl::StrCat("restored state has ", groups.size(),
                                            " cache groups, this model's layout ", expected));
  }
  if (num_tokens < 0) return absl::DataLossError("restored state: negative token count");
  for (const GroupRows& g : groups) {
    if (g.first_row < 0 || g.first_row > g.size) {
      return absl::DataLossError(
          absl::StrCat("restored state: bad row range [", g.first_row, ", ", g.size, ")"));
    }
  }
  size_t i = 0;
  for (auto& layer : groups_) {
    for (PagedRows& rows : layer) {
      if (Status st = rows.Assign(groups[i].first_row, groups[i].size, groups[i].data); !st.ok()) {
        Free();
        return st;
      }
      ++i;
    }
  }
  num_tokens_ = num_tokens;
  return absl::OkStatus();
}

Status SequenceState::ExtendForTransfer(int64_t num_tokens, std::span<const GroupRows> groups,
                                        std::span<const int64_t> ship_from) {
  const size_t expected = NumGroups();
  if (groups.size() != expected || ship_from.size() != expected) {
    return absl::InternalError(absl::StrCat("a transfer into ", groups.size(), " cache groups (",
                                            ship_from.size(), " starts), this model has ",
                                            expected));
  }
  size_t i = 0;
  for (auto& layer : groups_) {
    for (PagedRows& rows : layer) {
      if (Status st = ExtendGroupForTransfer(rows, groups[i], ship_from[i]); !st.ok()) {
        Free();
        return st;
      }
      ++i;
    }
  }
  num_tokens_ = num_tokens;
  return absl::OkStatus();
}

int64_t SequenceState::MemoryBytes() const {
  int64_t total = 0;
  for (const auto& layer : groups_) {
    for (const PagedRows& rows : layer) total += rows.bytes();
  }
  return total;
}

void SequenceState::Free() {
  for (auto& layer : groups_) {
    for (PagedRows& rows : layer) rows.Clear();
  }
  num_tokens_ = 0;
}

}  // namespace pdspark::engine
