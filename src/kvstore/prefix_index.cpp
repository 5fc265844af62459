#include "kvstore/prefix_index.hpp"

#include <algorithm>

namespace llamapp::detail {

struct PrefixIndex::Node {
    std::vector<Token> edge;  // tokens from the parent to this node
    std::size_t depth = 0;    // tokens from the root to the end of `edge`
    std::map<Token, std::unique_ptr<Node>> children;
    std::vector<EntryHandle> ends;  // entries whose sequence ends here
    std::size_t count = 0;          // entries in this subtree

    // Visits the subtree except `skip`; true when the visitor asked to stop.
    bool visit_all(const Visit& visit, std::size_t lcp, const Node* skip) const {
        for (EntryHandle e : ends) {
            if (visit(e, lcp)) return true;
        }
        for (const auto& [first, child] : children) {
            if (child.get() != skip && child->count > 0 && child->visit_all(visit, lcp, nullptr))
                return true;
        }
        return false;
    }
};

// Where a prompt leaves the tree: the full nodes on its path and a child it entered partway.
struct PrefixIndex::Walk {
    std::vector<const Node*> path;  // root first
    const Node* partial = nullptr;  // child whose edge matched only `partial_depth` tokens
    std::size_t partial_depth = 0;
};

PrefixIndex::PrefixIndex() : root_(std::make_unique<Node>()) {}
PrefixIndex::~PrefixIndex() = default;
PrefixIndex::PrefixIndex(PrefixIndex&&) noexcept = default;
PrefixIndex& PrefixIndex::operator=(PrefixIndex&&) noexcept = default;

bool PrefixIndex::empty() const {
    return root_->count == 0;
}

PrefixIndex::Walk PrefixIndex::walk(std::span<const Token> prompt) const {
    Walk w;
    const Node* node = root_.get();
    w.path.push_back(node);
    std::size_t at = 0;
    while (at < prompt.size()) {
        auto it = node->children.find(prompt[at]);
        if (it == node->children.end()) break;
        const Node* child = it->second.get();
        std::size_t k = 0;
        while (k < child->edge.size() && at + k < prompt.size() && child->edge[k] == prompt[at + k])
            ++k;
        if (k < child->edge.size()) {
            w.partial = child;
            w.partial_depth = at + k;
            break;
        }
        at += k;
        node = child;
        w.path.push_back(node);
    }
    return w;
}

void PrefixIndex::insert(std::span<const Token> tokens, EntryHandle entry) {
    Node* node = root_.get();
    ++node->count;
    std::size_t at = 0;
    while (at < tokens.size()) {
        auto& slot = node->children[tokens[at]];
        if (!slot) {
            slot = std::make_unique<Node>();
            slot->edge.assign(tokens.begin() + static_cast<std::ptrdiff_t>(at), tokens.end());
            slot->depth = tokens.size();
            node = slot.get();
            ++node->count;
            at = tokens.size();
            break;
        }
        Node* child = slot.get();
        std::size_t k = 0;
        while (k < child->edge.size() && at + k < tokens.size() && child->edge[k] == tokens[at + k])
            ++k;
        if (k < child->edge.size()) {
            // Split the edge: a new middle node holds the shared part.
            auto middle = std::make_unique<Node>();
            middle->edge.assign(child->edge.begin(),
                                child->edge.begin() + static_cast<std::ptrdiff_t>(k));
            middle->depth = at + k;
            middle->count = child->count;
            child->edge.erase(child->edge.begin(),
                              child->edge.begin() + static_cast<std::ptrdiff_t>(k));
            const Token rest = child->edge.front();
            middle->children[rest] = std::move(slot);
            slot = std::move(middle);
            child = slot.get();
        }
        node = child;
        ++node->count;
        at += k;
    }
    node->ends.push_back(entry);
}

void PrefixIndex::erase(std::span<const Token> tokens, EntryHandle entry) {
    // Collect the path first: counts change only when the entry is really there.
    std::vector<Node*> path{root_.get()};
    std::size_t at = 0;
    while (at < tokens.size()) {
        auto it = path.back()->children.find(tokens[at]);
        if (it == path.back()->children.end()) return;
        Node* child = it->second.get();
        if (child->edge.size() > tokens.size() - at ||
            !std::equal(child->edge.begin(), child->edge.end(),
                        tokens.begin() + static_cast<std::ptrdiff_t>(at)))
            return;
        at += child->edge.size();
        path.push_back(child);
    }
    auto& ends = path.back()->ends;
    auto found = std::find(ends.begin(), ends.end(), entry);
    if (found == ends.end()) return;
    ends.erase(found);
    for (Node* n : path) --n->count;
    // Drop the empty tail of the path.
    for (std::size_t i = path.size() - 1; i > 0; --i) {
        if (path[i]->count > 0) break;
        path[i - 1]->children.erase(path[i]->edge.front());
    }
}

void PrefixIndex::by_common_prefix(std::span<const Token> prompt, const Visit& visit) const {
    const Walk w = walk(prompt);
    if (w.partial && w.partial->visit_all(visit, w.partial_depth, nullptr)) return;
    const Node* came_from = w.partial;
    for (auto it = w.path.rbegin(); it != w.path.rend(); ++it) {
        if ((*it)->depth == 0) break;  // the root: no common prefix
        if ((*it)->visit_all(visit, (*it)->depth, came_from)) return;
        came_from = *it;
    }
}

void PrefixIndex::by_boundary(std::span<const Token> prompt, const Visit& visit) const {
    const Walk w = walk(prompt);
    for (auto it = w.path.rbegin(); it != w.path.rend(); ++it) {
        for (EntryHandle e : (*it)->ends) {
            if (visit(e, (*it)->depth)) return;
        }
    }
}

std::size_t PrefixIndex::deepest_match(std::span<const Token> tokens) const {
    const Walk w = walk(tokens);
    return w.partial ? w.partial_depth : w.path.back()->depth;
}

}  // namespace llamapp::detail
