from app import pages

pages.explorer_page()
