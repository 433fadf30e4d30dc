-- A pandoc filter: a man page made from the documentation's own sections (README.md and
-- docs/*.md), so that each text has one source. The page's metadata names the sections
-- (`doc-sections`, by their heading text, which is unique across the files); they
-- replace the page's empty `::: doc-sections` div. Each is taken with everything under
-- it, up to the next heading of its level or above (a file's own title ends it too), and
-- one level up (a `##` becomes the page's `.SH`). Links keep their text; their targets
-- are repository paths that a man page cannot follow. A table becomes a list, as man
-- pages have them: each row's first cell (a key, a name) is the term, the middle cells
-- follow as "header: value", the last (the meaning) after them; a man page's narrow
-- table columns cannot hold the long code spans. Lines are set ragged-right and not
-- hyphenated, so a key is not split.
-- HATCHERY_DOCS: the files, separated by ':' (default README.md).
local doc_paths = os.getenv('HATCHERY_DOCS') or 'README.md'

local function read_docs()
  local blocks = pandoc.List()
  for path in doc_paths:gmatch('[^:]+') do
    local f = assert(io.open(path, 'r'), 'doc-sections.lua: cannot open ' .. path)
    local text = f:read('a')
    f:close()
    blocks:extend(pandoc.read(text, 'gfm').blocks)
  end
  return blocks
end

local function section(blocks, title)
  local out, level = {}, nil
  for _, b in ipairs(blocks) do
    if b.t == 'Header' then
      if level and b.level <= level then break end
      if not level and pandoc.utils.stringify(b) == title then level = b.level end
    end
    if level then table.insert(out, b) end
  end
  assert(level, 'doc-sections.lua: no document has a section "' .. title .. '"')
  return out, level
end

local function inlines_of(blocks)
  local out = pandoc.List()
  for i, b in ipairs(blocks) do
    if i > 1 then out:insert(pandoc.Space()) end
    if b.content then out:extend(b.content) end
  end
  return out
end

local function table_to_list(t)
  local simple = pandoc.utils.to_simple_table(t)
  local n = #simple.headers
  if n < 2 then return nil end
  local items = pandoc.List()
  for _, row in ipairs(simple.rows) do
    local details = pandoc.List()
    for i = 2, n - 1 do
      local header = pandoc.utils.stringify(simple.headers[i])
      if #details > 0 then details:extend({ pandoc.Str(';'), pandoc.Space() }) end
      details:extend({ pandoc.Emph({ pandoc.Str(header .. ':') }), pandoc.Space() })
      details:extend(inlines_of(row[i]))
    end
    local body = pandoc.List()
    if #details > 0 then body:insert(pandoc.Para(details)) end
    body:insert(pandoc.Para(inlines_of(row[n])))
    items:insert({ inlines_of(row[1]), { body } })
  end
  return pandoc.DefinitionList(items)
end

-- Paths of the source tree as an installed system has them: a man page is read where the
-- package put its files, not in a checkout. The first prefix that matches a code span is
-- replaced; a path only the source tree has is said to be the source tree's.
local installed = {
  { 'deploy/guest-firewall.sh', '/usr/lib/hatchery/guest-firewall.sh' },
  { 'deploy/hatchery.example.yaml', '/usr/share/doc/hatchery/examples/hatchery.example.yaml' },
  { 'deploy/github-app-manifest.json', '/usr/share/doc/hatchery/examples/github-app-manifest.json' },
  { 'deploy/monitoring/', '/usr/share/doc/hatchery/examples/' },
  { 'docs/OPERATIONS.md', '/usr/share/doc/hatchery/OPERATIONS.md.gz' },
  { 'docs/POWER-HOST.md', '/usr/share/doc/hatchery/POWER-HOST.md.gz' },
  { 'docs/CONFIGURATION.md', '/usr/share/doc/hatchery/CONFIGURATION.md.gz' },
  { 'docs/RUNNING.md', '/usr/share/doc/hatchery/RUNNING.md.gz' },
  { 'docs/IMAGES.md', '/usr/share/doc/hatchery/IMAGES.md.gz' },
  { 'deploy/hatcheryd.service', 'hatcheryd.service' },
  { 'images/enable-binfmt.sh', '/usr/lib/hatchery/image/enable-binfmt.sh' },
  { 'images/runner/build-image.sh', 'hatchery-build-image' },
  { 'images/runner/initramfs/', '/usr/lib/hatchery/image/runner/initramfs/' },
}
local source_only = { 'deploy/', 'docs/', 'images/', 'tests/', 'controller/', 'agent/', 'debian/', 'docker/', 'include/' }

local function starts(s, prefix) return s:sub(1, #prefix) == prefix end

local function installed_path(c)
  for _, pair in ipairs(installed) do
    if starts(c.text, pair[1]) then
      c.text = pair[2] .. c.text:sub(#pair[1] + 1)
      return c
    end
  end
  for _, prefix in ipairs(source_only) do
    if starts(c.text, prefix) then
      return { pandoc.Str('the'), pandoc.Space(), pandoc.Str('source'), pandoc.Space(),
               pandoc.Str("tree's"), pandoc.Space(), c }
    end
  end
end

function Pandoc(doc)
  local wanted = doc.meta['doc-sections']
  if not wanted then return doc end
  local docs, taken = read_docs(), pandoc.List()
  for _, title in ipairs(wanted) do
    local blocks, level = section(docs, pandoc.utils.stringify(title))
    for _, b in ipairs(blocks) do
      if b.t == 'Header' then b.level = math.max(1, b.level - level + 1) end
      taken:insert(b)
    end
  end
  local placed = false
  doc = doc:walk({
    Div = function(d)
      if d.classes:includes('doc-sections') then
        placed = true
        return taken
      end
    end,
  })
  assert(placed, 'doc-sections.lua: the page has no ::: doc-sections div')
  doc.meta['header-includes'] = pandoc.MetaBlocks({ pandoc.RawBlock('man', '.nh\n.ad l') })
  doc = doc:walk({ Link = function(l) return l.content end, Table = table_to_list })
  return doc:walk({ Code = installed_path })
end
