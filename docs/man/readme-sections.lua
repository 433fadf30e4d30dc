-- A pandoc filter: a man page made from README.md's own sections, so that the README
-- stays the one source of what it says. The page's metadata names the sections
-- (`readme-sections`, by their heading text); they replace the page's empty
-- `::: readme-sections` div. Each is taken with everything under it, up to the next
-- heading of its level or above, and one level up (the README's `##` becomes the
-- page's `.SH`). Links keep their text; their targets are repository paths that a man
-- page cannot follow. In tables, the first column (a key, a name) gets a quarter of the
-- width and the last (the meaning) nearly half. Lines are set ragged-right and not
-- hyphenated: the README's long code spans cannot be justified, and a key must not be
-- split.
local readme_path = os.getenv('HATCHERY_README') or 'README.md'

local function read_readme()
  local f = assert(io.open(readme_path, 'r'), 'readme-sections.lua: cannot open ' .. readme_path)
  local text = f:read('a')
  f:close()
  return pandoc.read(text, 'gfm').blocks
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
  assert(level, 'readme-sections.lua: README.md has no section "' .. title .. '"')
  return out, level
end

local function widen_last_column(t)
  local n = #t.colspecs
  if n < 2 then return t end
  for i = 1, n do
    if i == 1 then
      t.colspecs[i][2] = (n == 2) and 0.35 or 0.25
    elseif i == n then
      t.colspecs[i][2] = (n == 2) and 0.6 or 0.45
    else
      t.colspecs[i][2] = 0.3 / (n - 2)
    end
  end
  return t
end

function Pandoc(doc)
  local wanted = doc.meta['readme-sections']
  if not wanted then return doc end
  local readme, taken = read_readme(), pandoc.List()
  for _, title in ipairs(wanted) do
    local blocks, level = section(readme, pandoc.utils.stringify(title))
    for _, b in ipairs(blocks) do
      if b.t == 'Header' then b.level = math.max(1, b.level - level + 1) end
      taken:insert(b)
    end
  end
  local placed = false
  doc = doc:walk({
    Div = function(d)
      if d.classes:includes('readme-sections') then
        placed = true
        return taken
      end
    end,
  })
  assert(placed, 'readme-sections.lua: the page has no ::: readme-sections div')
  doc.meta['header-includes'] = pandoc.MetaBlocks({ pandoc.RawBlock('man', '.nh\n.ad l') })
  return doc:walk({ Link = function(l) return l.content end, Table = widen_last_column })
end
